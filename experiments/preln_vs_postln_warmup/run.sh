#!/usr/bin/env bash
# Pre-LN vs Post-LN × warmup × peak learning rate on Multi30k de→en (Xiong et al. 2020, §3.2).
# Runs the sweep (36 runs: 12 settings × 3 seeds), then writes results.md and the plots next to this script.
#   experiments/preln_vs_postln_warmup/run.sh
#   SEEDS=0,1 experiments/preln_vs_postln_warmup/run.sh          # fewer seeds
#   experiments/preln_vs_postln_warmup/run.sh hydra/launcher=joblib hydra.launcher.n_jobs=2  # 2 at once
#   SWEEP=logs/study_preln_postln/multiruns/<existing> SKIP_TRAIN=1 …/run.sh   # re-tabulate only
source "$(dirname "$0")/../study.sh"
SEEDS="${SEEDS:-0,1,2}"
SWEEP="$(sweep_dir sweep "${SWEEP:-logs/study_preln_postln/multiruns/$STAMP}")"

# diverged Post-LN runs are an expected outcome here
train_sweep sweep "$SWEEP" experiment=study_preln_postln \
    model.norm=pre,post optim.warmup_steps=0,500,4000 optim.lr=5e-4,1e-3 seed="$SEEDS" "$@"

BY=(--by model.norm optim.warmup_steps optim.lr)
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --metric test/bleu val/bleu val/loss test/loss \
    --vs-best --plot "$OUT/val_loss.png" > "$OUT/results.md"
{  # the same tests on val/loss; Pre-LN against Post-LN over all six settings
  "$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --metric val/loss --vs-best | grep '^Welch'
  echo
  "$PY" -m attnlab.compare "$SWEEP" --by model.norm --metric test/bleu val/loss --vs pre post
  echo
  # planned comparisons the README reads (Holm over these three and the pooled test there)
  label() { set -- $1; echo "model.norm=$1 optim.warmup_steps=$2 optim.lr=$3"; }
  for pair in "post 500 0.001|post 0 0.001" "post 500 0.0005|post 0 0.0005" \
              "pre 0 0.0005|post 0 0.0005"; do
    IFS='|' read -r a b <<< "$pair"
    "$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --metric test/bleu --vs "$(label "$a")" \
        "$(label "$b")" | grep '^Welch'
  done
} >> "$OUT/results.md"
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --curve-metric train/loss \
    --plot "$OUT/train_loss.png" > /dev/null
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --curve-metric diag/grad_ratio_last_first \
    --plot "$OUT/grad_ratio.png" > /dev/null
echo "wrote $OUT/results.md, val_loss.png, train_loss.png, grad_ratio.png (runs: $SWEEP)"
