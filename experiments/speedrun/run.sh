#!/usr/bin/env bash
# The CPU speedrun, trick by trick: experiment=speedrun_shakespeare_char_cpu (the recipe: Muon,
# a warm-up-stable-decay schedule, 650 steps) against experiment=nanogpt_shakespeare_char_cpu
# (the baseline: AdamW, cosine, 2000 steps), each trick removed from the recipe and added to the
# baseline one at a time. Every tuned arm first gets its own learning-rate grid (tuning seed 100,
# which reports nothing; widened where its best was at an edge), then three fresh seeds at the
# grid's best rate.
#   attnlab-reproduce speedrun --train    # this script (about 1 h 30 on 2 idle cores)
#   attnlab-reproduce speedrun --check    # the analysis of the committed runs
# The arms (each named by experiment_name; val every 50 steps, every 100 in 2000-step arms):
#   recipe           Muon, WSD (warm-up 50, stable, 1-sqrt decay over the last 30 % to 0), 650
#                    steps; tuned
#   recipe_no_muon   AdamW in the recipe, given 1000 steps: at least the recipe's wall time, as a
#                    Muon step costs at most 1.54 AdamW steps (docs/performance.md); tuned
#   recipe_no_wsd    the recipe with the baseline's cosine (warm-up 100, floor 1e-4); tuned
#   baseline         the preset as it is: AdamW at nanoGPT's 1e-3, cosine, 2000 steps
#   baseline_lr      the baseline at its grid's best rate (the baseline's grid)
#   baseline_muon    the baseline with Muon, at the recipe's tuned Muon rate (not tuned at 2000)
#   baseline_wsd     the baseline with the recipe's schedule, at 1e-3
#   baseline_lr_wsd  the same at baseline_lr's rate
# STAGE=tune|more|seeds runs one stage, ONLY=ARM one arm (the study ran in these pieces).
# Extra arguments go to every training run (trainer=gpu, …); JOBS=1 trains one run at a time
# (../study.sh; the README's "Rerun on GPUs"). The target loss is Tiny Shakespeare's: no CORPUS.
source "$(dirname "$0")/../study.sh"
no_corpus "Tiny Shakespeare (the target, val/loss 1.885, is that text's)"
SEEDS="${SEEDS:-0,1,2}"
export ATTNLAB_DATA_ROOT="${ATTNLAB_DATA_ROOT:-data}"

BASE=(experiment=nanogpt_shakespeare_char_cpu trainer.val_check_interval=100)
RECIPE=(experiment=speedrun_shakespeare_char_cpu trainer.val_check_interval=50)
WSD=(optim.schedule=wsd optim.decay_fraction=0.3 optim.decay_shape=sqrt optim.warmup_steps=50
     optim.min_lr=0.0)
COSINE=(optim.schedule=cosine optim.decay_fraction='???' optim.decay_shape='???'
        optim.warmup_steps=100 optim.min_lr=1e-4)
declare -A ARM=(
  [baseline]="${BASE[*]}"
  [baseline_muon]="${BASE[*]} optim.name=muon"
  [baseline_wsd]="${BASE[*]} ${WSD[*]}"
  [baseline_lr]="${BASE[*]}"
  [baseline_lr_wsd]="${BASE[*]} ${WSD[*]}"
  [recipe]="${RECIPE[*]}"
  [recipe_no_muon]="${RECIPE[*]} optim.name=adamw trainer.max_steps=1000 optim.decay_steps=1000"
  [recipe_no_wsd]="${RECIPE[*]} ${COSINE[*]}"
)
# the tuned arms' grids: factors of 2 around the presets' rates before this study (AdamW 1e-3,
# Muon 3e-3; the speedrun preset now has the grid's best, 6e-3), then (MORE) upwards, where the
# best rate was the grid's upper edge
declare -A GRID=(
  [recipe]=1.5e-3,3e-3,6e-3
  [recipe_no_muon]=1e-3,2e-3,4e-3
  [recipe_no_wsd]=1.5e-3,3e-3,6e-3
  [baseline]=1e-3,2e-3,4e-3
)
declare -A MORE=(
  [recipe]=1.2e-2,2.4e-2
  [recipe_no_muon]=8e-3,1.6e-2
  [recipe_no_wsd]=1.2e-2,2.4e-2
  [baseline]=8e-3,1.6e-2
)
TUNED=(recipe recipe_no_muon recipe_no_wsd baseline)
ARMS=("${TUNED[@]}" baseline_muon baseline_wsd baseline_lr baseline_lr_wsd)

tune() {  # tune NAME ARM RATES [OVERRIDE ...]: a grid of arm ARM, tuning seed 100, JOBS at once
  local name="$1" arm="$2" rates="$3"
  shift 3
  # shellcheck disable=SC2086  # the arm's overrides are words
  train_sweep "$name" \
    "$(sweep_dir "$name" "logs/study_speedrun/multiruns/${name}_$STAMP")" ${ARM[$arm]} \
    experiment_name="$arm" optim.lr="$rates" seed=100 test=false \
    "${AT_ONCE[@]}" "$@"
}
# STAGE=tune|more|seeds: one stage only; ONLY=ARM: one arm
stage() { [ -z "${STAGE:-}" ] || [ "$STAGE" = "$1" ]; }
for arm in "${TUNED[@]}"; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$arm" ] && continue
  if stage tune; then tune "tune_$arm" "$arm" "${GRID[$arm]}" "$@"; fi
  if stage more && [ -n "${MORE[$arm]:-}" ]; then tune "tune_${arm}_more" "$arm" "${MORE[$arm]}" "$@"; fi
done

# three fresh seeds per arm: the recipe's arms at their grid's best rate (lr_grid.md), the
# baseline's at one rate each; JOBS at a time
declare -A RATE=(
  [recipe]=6e-3
  [recipe_no_muon]=4e-3
  [recipe_no_wsd]=1.2e-2
  [baseline]=1e-3
  [baseline_muon]=6e-3
  [baseline_wsd]=1e-3
  [baseline_lr]=4e-3
  [baseline_lr_wsd]=4e-3
)
for arm in "${ARMS[@]}"; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$arm" ] && continue
  stage seeds || continue
  # shellcheck disable=SC2086
  train_sweep "$arm" \
    "$(sweep_dir "$arm" "logs/study_speedrun/multiruns/${arm}_$STAMP")" ${ARM[$arm]} \
    experiment_name="$arm" optim.lr="${RATE[$arm]}" seed="$SEEDS" test=false \
    "${AT_ONCE[@]}" "$@"
done
[ -n "${ONLY:-}${STAGE:-}" ] && exit 0
analysis_follows

# the analysis: every sweep is read from runs/ (or, while training, where it was written)
sweeps() { for s in "$@"; do sweep_dir "$s" "$RUNS/$s"; done; }
TUNE=($(for arm in "${TUNED[@]}"; do sweeps "tune_$arm"; done
        for arm in "${!MORE[@]}"; do sweeps "tune_${arm}_more"; done))
SEEDED=($(sweeps "${ARMS[@]}"))
# the target: the baseline's loss at its 2000 steps (1.878 ± 0.002 over seeds 0-2, 1.881 at seed
# 0), rounded up so that every baseline run reaches it within its budget
TARGET=1.885
"$PY" -m attnlab.compare "${TUNE[@]}" --by experiment_name optim.lr --metric val/loss \
  > "$OUT/lr_grid.md" 2>/dev/null
# the planned comparisons, Holm over the seven: each trick out of the recipe, each into the
# baseline (Muon and WSD at a tuned AdamW rate), the rate itself, and the recipe against both
# baselines
arm() { echo "experiment_name=$1"; }
PAIRS=(--vs "$(arm recipe)" "$(arm recipe_no_muon)" --vs "$(arm recipe)" "$(arm recipe_no_wsd)"
       --vs "$(arm baseline)" "$(arm baseline_lr)" --vs "$(arm baseline_lr)" "$(arm baseline_muon)"
       --vs "$(arm baseline_lr)" "$(arm baseline_lr_wsd)" --vs "$(arm baseline)" "$(arm recipe)"
       --vs "$(arm baseline_lr)" "$(arm recipe)")
{
  echo "## Final validation loss"
  echo
  "$PY" -m attnlab.compare "${SEEDED[@]}" --by experiment_name --metric val/loss "${PAIRS[@]}" \
    --plot "$OUT/val_loss.png" 2>/dev/null
  echo
  echo "## Parameters, training FLOPs (the model's, 3 × forward) and tokens"
  echo
  "$PY" -m attnlab.compare "${SEEDED[@]}" --by experiment_name --metric params flops tokens \
    2>/dev/null
  echo
  echo "## Steps to the target, val/loss ≤ $TARGET"
  echo
  "$PY" -m attnlab.compare "${SEEDED[@]}" --by experiment_name --reach "$TARGET" --x step \
    "${PAIRS[@]}" 2>/dev/null
} > "$OUT/results.md"
if measuring; then measure step_time.py step_time.md; fi
echo "wrote $OUT/lr_grid.md, results.md, val_loss.png (runs: ${SEEDED[*]})"
