#!/usr/bin/env bash
# Encoder-decoder vs decoder-only (causal LM, prefix LM) vs a half-depth encoder-decoder on
# Multi30k de→en (Raffel et al. 2020, §3.2, Table 2). Runs the sweep (4 variants × 3 seeds = 12
# runs), then writes results.md and the plots next to this script.
#   experiments/architecture_comparison/run.sh
#   experiments/architecture_comparison/run.sh hydra/launcher=joblib hydra.launcher.n_jobs=2  # 2 at once
#   SWEEP=logs/study_architectures/multiruns/<existing> SKIP_TRAIN=1 …/run.sh   # re-tabulate only
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PY="${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}"
SEEDS="${SEEDS:-0,1,2}"
SWEEP="${SWEEP:-logs/study_architectures/multiruns/$(date +%Y-%m-%d_%H-%M-%S)}"

if [ -z "${SKIP_TRAIN:-}" ]; then
  "$PY" -m attnlab.train -m \
      experiment=study_architectures_encdec,study_architectures_encdec_half,study_architectures_lm,study_architectures_prefix_lm \
      seed="$SEEDS" trainer.enable_progress_bar=false hydra.sweep.dir="$SWEEP" "$@" \
    || echo "some runs did not complete (see 'failed' in the table); comparing anyway"
fi

BY=(--by experiment_name)
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --metric test/bleu val/loss test/loss params \
    tokens_per_sec --plot "$HERE/val_loss.png" > "$HERE/results.md"
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --curve-metric val/bleu \
    --plot "$HERE/val_bleu.png" > /dev/null
echo "wrote $HERE/results.md, val_loss.png, val_bleu.png (runs: $SWEEP)"
