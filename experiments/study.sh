# Sourced by each study's run.sh, not run on its own: strict mode, the repository root as the
# working directory, and what every study repeats.
#   HERE   the study's folder
#   OUT    where its tables and plots are written: HERE unless set (attnlab-reproduce --check
#          sets a temporary folder and compares)
#   RUNS   its committed raw runs, HERE/runs/<sweep>/<job>/{summary.json,metrics.csv}
#   PY     .venv/bin/python when `make setup` made it, else python
#   STAMP  a timestamp for new sweep directories
#   sweep_dir NAME DEFAULT   the sweep a table reads: RUNS/NAME when SKIP_TRAIN is set and
#                            SWEEP is not (the analysis of the committed runs), else DEFAULT
#   train_sweep NAME SWEEP OVERRIDE...   the multirun into SWEEP, then its raw files saved to
#                            RUNS/NAME (nothing when SKIP_TRAIN is set)
#   measuring                true when the hardware measurements run: when training, or when
#                            MEASURE is set
#   measure SCRIPT FILE      runs HERE/SCRIPT into OUT/FILE, after the machine line
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
cd "$HERE/../.."
PY="${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}"
STAMP="$(date +%Y-%m-%d_%H-%M-%S)"
OUT="${OUT:-$HERE}"
RUNS="$HERE/runs"
mkdir -p "$OUT"

sweep_dir() {
  if [ -n "${SKIP_TRAIN:-}" ] && [ -z "${SWEEP:-}" ]; then echo "$RUNS/$1"; else echo "$2"; fi
}

train_sweep() {
  local name="$1" sweep="$2"
  shift 2
  if [ -n "${SKIP_TRAIN:-}" ]; then return 0; fi
  # exit code 1 when a job did not complete (diverged runs included): the table counts them
  "$PY" -m attnlab.train -m trainer.enable_progress_bar=false hydra.sweep.dir="$sweep" "$@" \
    || echo "some runs did not complete (see 'failed' in the table); comparing anyway"
  "$PY" -m attnlab.studies --save-runs "$sweep" "$RUNS/$name"
}

measuring() { [ -z "${SKIP_TRAIN:-}" ] || [ -n "${MEASURE:-}" ]; }

measure() { { "$PY" -m attnlab.studies --machine; echo; "$PY" "$HERE/$1"; } > "$OUT/$2"; }
