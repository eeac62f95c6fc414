#!/usr/bin/env bash
# Depth and stability, Pre-LN vs Post-LN vs DeepNorm at 6, 12 and 24 layers per stack on Multi30k de→en
# (Liu et al. 2020; Xiong et al. 2020, §3.3). First the gradient-norm profile at
# initialisation (one batch, no training, ~1–2 min), then the training sweep (27 runs), then
# results.md and the plots next to this script.
# The sweep runs two jobs at a time with one thread each; its raw runs are saved to runs/sweep.
#   attnlab-reproduce depth_stability --train    # this script
#   attnlab-reproduce depth_stability --check    # the analysis of the committed runs
#   PROFILE_ONLY=1 experiments/depth_stability/run.sh   # the gradient profile only
#   JOBS=1 experiments/depth_stability/run.sh trainer=gpu trainer.max_steps=3600
#                                           # on one GPU, one run at a time (README: Rerun on GPUs)
# Extra arguments go to every training run; DEPTHS are the layers per stack. JOBS, PLAN: see
# ../study.sh.
source "$(dirname "$0")/../study.sh"
no_corpus Multi30k
SEEDS="${SEEDS:-0,1,2}"
DEPTHS="${DEPTHS:-6,12,24}"
TUNE_SWEEP="$(sweep_dir tune "${SWEEP:-logs/study_depth/multiruns/$STAMP}_tune")"
TUNE_HIGH_SWEEP="$(sweep_dir tune_high "${SWEEP:-logs/study_depth/multiruns/$STAMP}_tune_high")"
TUNE_PRE_SWEEP="$(sweep_dir tune_pre "${SWEEP:-logs/study_depth/multiruns/$STAMP}_tune_pre")"
SWEEP="$(sweep_dir sweep "${SWEEP:-logs/study_depth/multiruns/$STAMP}")"

if measuring && [ -z "${STAGE:-}" ]; then  # gradients at initialisation: no training, so no raw runs
  # shellcheck disable=SC2086  # the depths are words
  "$PY" "$HERE/grad_profile.py" --depths ${DEPTHS//,/ } --seeds 0 1 2 --per-layer \
    | tee "$OUT/grad_profile_init.md"
fi
[ -n "${PROFILE_ONLY:-}" ] && exit 0

# diverged deep Post-LN runs are an expected outcome; JOBS at once (default 2, one thread each)
if [ -z "${STAGE:-}" ]; then
  train_sweep sweep "$SWEEP" experiment=study_depth \
      model.n_layers="$DEPTHS" model.norm=pre,post,deepnorm seed="$SEEDS" "${AT_ONCE[@]}" "$@"
fi
# each norm's own rates besides the sweep's 1e-3, on tuning seed 100 (which reports nothing):
# lower for Post-LN and DeepNorm, one step either side for Pre-LN (STAGE=tune: these alone,
# STAGE=tune_high: the higher grid below alone; TUNE= empty: none)
if [ -n "${TUNE-1}" ] && { [ -z "${STAGE:-}" ] || [ "$STAGE" = tune ]; }; then
  train_sweep tune "$TUNE_SWEEP" experiment=study_depth model.n_layers="$DEPTHS" \
      model.norm=post,deepnorm optim.lr=2.5e-4,5e-4 seed=100 "${AT_ONCE[@]}" "$@"
  train_sweep tune_pre "$TUNE_PRE_SWEEP" experiment=study_depth model.n_layers="$DEPTHS" \
      model.norm=pre optim.lr=5e-4,2e-3 seed=100 "${AT_ONCE[@]}" "$@"
fi
# and higher for Post-LN and DeepNorm, where their best rate above was 1e-3, the grid's top
if [ -n "${TUNE-1}" ] && { [ -z "${STAGE:-}" ] || [ "$STAGE" = tune_high ]; }; then
  train_sweep tune_high "$TUNE_HIGH_SWEEP" experiment=study_depth model.n_layers="$DEPTHS" \
      model.norm=post,deepnorm optim.lr=2e-3 seed=100 "${AT_ONCE[@]}" "$@"
fi
[ -n "${STAGE:-}" ] && exit 0
analysis_follows

BY=(--by model.norm model.n_layers)
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --metric test/bleu val/loss test/loss wall_s \
    --vs-best --plot "$OUT/val_loss.png" > "$OUT/results.md"
{  # every pair on val/loss (36 tests, Holm over all of them): the README reads a subset
  echo
  "$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --metric val/loss --all-pairs \
    | grep '^Welch\|^In each line'
} >> "$OUT/results.md"
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --curve-metric train/loss \
    --plot "$OUT/train_loss.png" > /dev/null
"$PY" -m attnlab.compare "$SWEEP" "${BY[@]}" --curve-metric diag/grad_ratio_last_first \
    --plot "$OUT/grad_ratio.png" > /dev/null
# each norm's rates: the sweep's 1e-3 (its 3 seeds) beside the tuning seed's other rates
if [ -n "${TUNE-1}" ]; then
  { echo "Each norm at each depth and rate: lr 1e-3 is the sweep (seeds 0, 1, 2), the other"
    echo "rates the tuning seed 100 alone (n = 1)."
    echo
    "$PY" -m attnlab.compare "$SWEEP" "$TUNE_SWEEP" "$TUNE_HIGH_SWEEP" "$TUNE_PRE_SWEEP" \
      --by model.norm model.n_layers optim.lr --metric test/bleu val/loss 2>/dev/null
  } > "$OUT/lr_grid.md"
fi
echo "wrote $OUT/results.md, lr_grid.md, val_loss.png, train_loss.png, grad_ratio.png (runs: $SWEEP)"
