#!/usr/bin/env bash
# attnlab's GPU suite in one command (docs/performance.md, "GPU suite"):
#
#   scripts/gpu_suite.sh [--out DIR] [--nanogpt DIR] [--budget 480]   # one CUDA GPU, ≤ 8 min
#   scripts/gpu_suite.sh --tiny --out /tmp/suite                     # CPU dry-run
#
# Runs attnlab from this checkout's src/ (no install needed). A machine without
# hydra-core and omegaconf (a lent GPU machine reaches no package index) gets them from
# the wheels carried in scripts/wheels, installed into a folder of their own, not into the
# interpreter's site-packages. PYTHON picks the interpreter (default: python3).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT" || exit 2

if ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
  SITE="${TMPDIR:-/tmp}/gpu_suite_site"
  echo "gpu_suite: hydra-core/omegaconf missing; installing scripts/wheels into $SITE"
  # --no-deps: antlr4 (their one dependency not usually present) is carried too; PyYAML
  # and packaging come with torch's usual environments
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" --find-links scripts/wheels \
    hydra-core omegaconf antlr4-python3-runtime \
    || { echo "error: could not install the wheels in scripts/wheels" >&2; exit 2; }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

exec "$PY" scripts/gpu_suite.py "$@"
