#!/usr/bin/env bash
# attnlab's GPU suite in one command (docs/performance.md, "GPU suite"):
#
#   scripts/gpu_suite.sh [--out DIR] [--nanogpt DIR] [--budget 480]   # one CUDA GPU, ≤ 8 min
#   scripts/gpu_suite.sh --tiny --out /tmp/suite                     # CPU dry-run
#
# Runs attnlab (python -m attnlab.bench.gpu.suite) from this checkout's src/ (no install
# needed). A machine without hydra-core and omegaconf (one that reaches no package index)
# gets them from wheels brought along in $WHEELS (default: wheels/ in the checkout, which
# git ignores), installed into a folder of their own, not into the interpreter's
# site-packages. Build that folder on a machine with an index, before carrying the checkout:
#
#   python -m pip download --no-deps -d wheels hydra-core==1.3.8 omegaconf==2.3.1 \
#       antlr4-python3-runtime==4.9.3
#
# PYTHON picks the interpreter (default: python3).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT" || exit 2

if ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
  SITE="${TMPDIR:-/tmp}/gpu_suite_site"
  WHEELS="${WHEELS:-$ROOT/wheels}"
  echo "gpu_suite: hydra-core/omegaconf missing; installing $WHEELS into $SITE"
  # --no-deps: antlr4 (their one dependency not usually present) is carried too; PyYAML
  # and packaging come with torch's usual environments
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" --find-links "$WHEELS" \
    hydra-core omegaconf antlr4-python3-runtime \
    || { echo "error: no hydra-core/omegaconf wheels in $WHEELS; download them first (see the top of scripts/gpu_suite.sh)" >&2; exit 2; }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

exec "$PY" -m attnlab.bench.gpu.suite "$@"
