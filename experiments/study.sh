# Sourced by each study's run.sh, not run on its own: strict mode, the repository root as the
# working directory, and what every study repeats.
#   HERE   the study's folder (results and plots are written there)
#   PY     .venv/bin/python when `make setup` made it, else python
#   STAMP  a timestamp for new sweep directories
#   train_sweep SWEEP OVERRIDE...   the multirun into SWEEP, unless SKIP_TRAIN is set
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
cd "$HERE/../.."
PY="${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}"
STAMP="$(date +%Y-%m-%d_%H-%M-%S)"

train_sweep() {
  local sweep="$1"
  shift
  if [ -n "${SKIP_TRAIN:-}" ]; then return 0; fi
  # exit code 1 when a job did not complete (diverged runs included): the table counts them
  "$PY" -m attnlab.train -m trainer.enable_progress_bar=false hydra.sweep.dir="$sweep" "$@" \
    || echo "some runs did not complete (see 'failed' in the table); comparing anyway"
}
