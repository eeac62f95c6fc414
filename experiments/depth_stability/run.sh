#!/usr/bin/env bash
# Depth and stability, Pre-LN vs Post-LN vs DeepNorm at 6, 12 and 24 layers per stack on
# Multi30k de→en (Liu et al. 2020; Xiong et al. 2020, §3.3). First the gradient-norm profile at
# initialisation (one batch, no training, ~1–2 min), then the training sweep at the shared rate
# 1e-3 (27 runs, runs/sweep), each norm's own rate grid on tuning seed 100 (42 runs, runs/tune*),
# and Pre-LN and DeepNorm at their best rates on the sweep's seeds (18 runs, runs/best_*), and
# the gate from outside attnlab's model code — torch's nn.Transformer (../reference_translation.py)
# at the baseline's setting (Pre-LN, 6 layers) and at Post-LN's at 6, 12 and 24 layers, seeds
# SEEDS (12 runs, runs/reference);
# then results.md, lr_grid.md, tuned.md, gate_reference.md and the plots next to this script.
# The sweeps run two jobs at a time with one thread each.
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
BASE="${SWEEP:-logs/study_depth/multiruns/$STAMP}"
TUNE_SWEEP="$(sweep_dir tune "${BASE}_tune")"
TUNE_HIGH_SWEEP="$(sweep_dir tune_high "${BASE}_tune_high")"
TUNE_TOP_SWEEP="$(sweep_dir tune_top "${BASE}_tune_top")"
TUNE_TOPMOST_SWEEP="$(sweep_dir tune_topmost "${BASE}_tune_topmost")"
TUNE_PRE_SWEEP="$(sweep_dir tune_pre "${BASE}_tune_pre")"
BEST_BASE="$(sweep_dir best "${BASE}_best")"  # best_<norm>_<rate> appended
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
# and 4e-3 for Pre-LN and DeepNorm, where their best above was 2e-3, the grid's top (STAGE=tune_top)
if [ -n "${TUNE-1}" ] && { [ -z "${STAGE:-}" ] || [ "$STAGE" = tune_top ]; }; then
  train_sweep tune_top "$TUNE_TOP_SWEEP" experiment=study_depth model.n_layers="$DEPTHS" \
      model.norm=pre,deepnorm optim.lr=4e-3 seed=100 "${AT_ONCE[@]}" "$@"
fi
# and 8e-3 and 1.6e-2 for both, where 4e-3 was best again (STAGE=tune_topmost)
if [ -n "${TUNE-1}" ] && { [ -z "${STAGE:-}" ] || [ "$STAGE" = tune_topmost ]; }; then
  train_sweep tune_topmost "$TUNE_TOPMOST_SWEEP" experiment=study_depth model.n_layers="$DEPTHS" \
      model.norm=pre,deepnorm optim.lr=8e-3,1.6e-2 seed=100 "${AT_ONCE[@]}" "$@"
fi
# each of Pre-LN and DeepNorm at its best rate on the tuning seed at each depth (by validation
# loss, lr_grid.md; inside the grid), on the fresh seeds SEEDS (Post-LN's best, 1e-3, is the
# sweep itself); BEST_<norm>_<depth>=lr sets a depth outside these (STAGE=best: these alone, as
# two streams, one per norm, of one run at a time with one thread each; TUNE= empty: none)
declare -A BEST_RATE=([pre_6]=8e-3 [pre_12]=8e-3 [pre_24]=8e-3
                      [deepnorm_6]=8e-3 [deepnorm_12]=4e-3 [deepnorm_24]=4e-3)
best_groups() {  # NORM: "rate depth,depth" for each of its best rates, over DEPTHS
  local norm="$1" depth rate var
  declare -A at=()
  for depth in ${DEPTHS//,/ }; do
    var="BEST_${norm}_$depth"
    rate="${!var:-${BEST_RATE[${norm}_$depth]:-}}"
    if [ -z "$rate" ]; then
      echo "error: no best rate for $norm at $depth layers: set BEST_${norm}_$depth=lr" >&2
      exit 2
    fi
    at[$rate]="${at[$rate]:+${at[$rate]},}$depth"
  done
  for rate in "${!at[@]}"; do echo "$rate ${at[$rate]}"; done | sort
}
declare -A BEST_GROUPS=()  # each norm's groups, once: a missing rate stops the script here
if [ -n "${TUNE-1}" ]; then
  for norm in pre deepnorm; do BEST_GROUPS[$norm]="$(best_groups "$norm")"; done
fi
best_dir() { echo "${BEST_BASE}_$1_$2"; }
best_sweeps() {  # NORM [OVERRIDE...]
  local norm="$1" rate depths
  shift
  while read -r rate depths; do
    train_sweep "best_${norm}_$rate" "$(best_dir "$norm" "$rate")" experiment=study_depth \
        model.norm="$norm" model.n_layers="$depths" optim.lr="$rate" seed="$SEEDS" "$@"
  done <<< "${BEST_GROUPS[$norm]}"
}
best_pre() { best_sweeps pre "$@"; }
best_deepnorm() { best_sweeps deepnorm "$@"; }
if [ -n "${TUNE-1}" ] && [ -z "${SKIP_TRAIN:-}" ] \
    && { [ -z "${STAGE:-}" ] || [ "$STAGE" = best ]; }; then
  streams best_pre best_deepnorm "$@"
fi
# the gate from outside attnlab's model code, and whether its Post-LN stalls at depth as
# attnlab's does (STAGE=reference: these alone)
REFERENCE_SETTINGS=("model.norm=pre model.n_layers=6" "model.norm=post model.n_layers=6"
                    "model.norm=post model.n_layers=12" "model.norm=post model.n_layers=24")
if [ -z "${STAGE:-}" ] || [ "$STAGE" = reference ]; then
  runs=()
  for setting in "${REFERENCE_SETTINGS[@]}"; do
    for seed in ${SEEDS//,/ }; do runs+=("$setting seed=$seed"); done
  done
  train_references reference "${BASE}_reference" "${runs[@]}" -- experiment=study_depth "$@"
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
      "$TUNE_TOP_SWEEP" "$TUNE_TOPMOST_SWEEP" \
      --by model.norm model.n_layers optim.lr --metric test/bleu val/loss 2>/dev/null
  } > "$OUT/lr_grid.md"
fi
# each norm at its own best rate (Post-LN at the sweep's 1e-3), the fresh seeds: at each depth
# Pre-LN against Post-LN, DeepNorm against Post-LN and DeepNorm against Pre-LN, Holm over the 9
if [ -n "${TUNE-1}" ]; then
  BEST_DIRS=() PAIRS=()
  declare -A RATE_OF=()
  for norm in pre deepnorm; do
    while read -r rate depths; do
      BEST_DIRS+=("$(best_dir "$norm" "$rate")")
      for depth in ${depths//,/ }; do RATE_OF[${norm}_$depth]="$(awk "BEGIN{print $rate}")"; done
    done <<< "${BEST_GROUPS[$norm]}"
  done
  at() { echo "model.norm=$1 model.n_layers=$2 optim.lr=$3"; }
  for depth in ${DEPTHS//,/ }; do
    pre="$(at pre "$depth" "${RATE_OF[pre_$depth]}")"
    deep="$(at deepnorm "$depth" "${RATE_OF[deepnorm_$depth]}")"
    post="$(at post "$depth" 0.001)"
    PAIRS+=(--vs "$pre" "$post" --vs "$deep" "$post" --vs "$deep" "$pre")
  done
  { echo "Each norm at its own best rate (Pre-LN and DeepNorm on seeds 0, 1, 2 at the tuning"
    echo "seed's best, Post-LN the sweep at its best, 1e-3); the 1e-3 rows are the sweep's."
    echo
    "$PY" -m attnlab.compare "$SWEEP" "${BEST_DIRS[@]}" --by model.norm model.n_layers optim.lr \
      --metric val/loss test/bleu "${PAIRS[@]}"
  } > "$OUT/tuned.md"
fi
compare_reference "$OUT/gate_reference.md" "$RUNS/reference" study_depth \
    "model.norm model.n_layers" "$SWEEP" "${REFERENCE_SETTINGS[@]}"
echo "wrote $OUT/results.md, lr_grid.md, tuned.md, gate_reference.md, val_loss.png," \
    "train_loss.png, grad_ratio.png (runs: $SWEEP)"
