#!/usr/bin/env bash
# Block ablations read per width and as compute multipliers over 4 widths × 3 seeds (Kaplan
# et al. 2020; Hoffmann et al. 2022, approach 1): SwiGLU vs ReLU (Shazeer 2020), RoPE vs
# learned positions (Su et al. 2021), Pre-LN vs Post-LN with warmup (Xiong et al. 2020), and
# the "modern" block (RMSNorm + RoPE + SwiGLU) against the GPT-2 block (the Mamba paper's
# Transformer++ vs Transformer, Gu & Dao 2023, Fig. 4). Standard parametrisation; every arm
# gets its own learning-rate grid at every width (tuning seed 100, which reports nothing),
# then three fresh seeds at the grid's best rate (RATE below). Runs are saved to
# runs/tune/<arm>/w<width> and runs/<arm>/w<width>; then lr_grid.md, results.md (each pair
# tested at each width, Holm over the widths; the fits of final values and the compute
# multiplier with CIs; each sweep's final loss per width), gate.md, cause.md and one plot per
# pair. Two streams of one thread each (about 1 h 20 on 2 idle cores).
#   attnlab-reproduce compute_multipliers --train    # this script
#   attnlab-reproduce compute_multipliers --check    # the analysis of the committed runs
# STAGE=tune|more|seeds|mup|gate runs one stage (the study ran in these pieces); gate (or GATE=1
# with the rest) runs the unmodified nanoGPT at the study's shape (../../shared/reference/nanoGPT or NANOGPT), mup the
# μP runs that cause.md reads (the block under μP at the rate transferred from width 32).
# WIDTHS and SEEDS default to the committed study's; a width outside the grids below takes its
# grid from GRID_<width>=lr,lr,… and its rate from RATE_<arm>_<width>; extra arguments go to
# every training run (trainer.max_steps=…). JOBS=1 runs the two streams one after the other,
# CORPUS trains on a corpus from attnlab-prepare (../study.sh; the README's "Rerun on GPUs").
source "$(dirname "$0")/../study.sh"
WIDTHS="${WIDTHS:-32,64,128,256}"
SEEDS="${SEEDS:-0,1,2}"
BASE="${SWEEP:-logs/study_compute_multipliers/$STAMP}"
declare -A ARM=(
  [gpt2]=""
  [relu]="model.ffn=relu"
  [swiglu]="model.ffn=swiglu"
  [rope]="model.pos=rope"
  [post]="model.norm=post"
  [modern]="model.norm_type=rmsnorm model.pos=rope model.ffn=swiglu"
)
# each width's grid: factors of 2 around a rate that falls with width
declare -A GRID=([32]=5e-3,1e-2,2e-2 [64]=3e-3,6e-3,1.2e-2 [128]=2e-3,4e-3,8e-3
                 [256]=1e-3,2e-3,4e-3)
# the grids widened where an arm's best rate was the grid's edge (lr_grid.md)
declare -A MORE=(
  [gpt2_32]=2.5e-3 [gpt2_128]=1.6e-2
  [relu_32]=2.5e-3 [relu_64]=2.4e-2 [relu_128]=1.6e-2 [relu_256]=8e-3
  [swiglu_32]=1.25e-3,2.5e-3 [swiglu_128]=1e-3
  [rope_32]=4e-2 [rope_64]=2.4e-2
  [post_64]=1.5e-3 [post_128]=5e-4,1e-3 [post_256]=2.5e-4,5e-4
  [modern_64]=1.5e-3 [modern_256]=5e-4
)
# each arm's best rate at each width in its grid (lr_grid.md)
declare -A RATE=(
  [gpt2_32]=5e-3 [gpt2_64]=6e-3 [gpt2_128]=8e-3 [gpt2_256]=2e-3
  [relu_32]=5e-3 [relu_64]=1.2e-2 [relu_128]=8e-3 [relu_256]=4e-3
  [swiglu_32]=2.5e-3 [swiglu_64]=6e-3 [swiglu_128]=2e-3 [swiglu_256]=2e-3
  [rope_32]=2e-2 [rope_64]=1.2e-2 [rope_128]=4e-3 [rope_256]=2e-3
  [post_32]=1e-2 [post_64]=3e-3 [post_128]=1e-3 [post_256]=5e-4
  [modern_32]=1e-2 [modern_64]=3e-3 [modern_128]=4e-3 [modern_256]=1e-3
)
lookup() {  # lookup VARIABLE TABLE KEY: the environment's VARIABLE, else TABLE[KEY]
  local -n table="$2"
  local value="${!1:-${table[$3]:-}}"
  if [ -z "$value" ]; then
    echo "error: no $2 for $3: give it as $1=… (see the head of this script)" >&2
    exit 2
  fi
  echo "$value"
}
stage() { [ -z "${STAGE:-}" ] || [ "$STAGE" = "$1" ]; }
sweep() {  # sweep NAME OVERRIDE...: one multirun of the study's preset, saved to runs/NAME
  local name="$1"
  shift
  train_sweep "$name" "$BASE/$name" experiment=study_compute_multipliers test=false \
    "${CORPUS_ARGS[@]}" "$@"
}
arms() {  # arms ARM...: each arm's stages, one after the other
  local arm width grid rate
  for arm in "$@"; do
    for width in ${WIDTHS//,/ }; do
      # shellcheck disable=SC2086  # the arm's overrides are words
      set -- model.d_model="$width" ${ARM[$arm]}
      if stage tune; then
        grid="$(lookup "GRID_$width" GRID "$width")"
        sweep "tune/$arm/w$width" "$@" optim.lr="$grid" seed=100 "${EXTRA[@]}"
      fi
      if stage more && [ -n "${MORE[${arm}_$width]:-}" ]; then
        sweep "tune_more/$arm/w$width" "$@" optim.lr="${MORE[${arm}_$width]}" seed=100 \
          "${EXTRA[@]}"
      fi
      if stage seeds; then
        rate="$(lookup "RATE_${arm}_$width" RATE "${arm}_$width")"
        sweep "$arm/w$width" "$@" optim.lr="$rate" seed="$SEEDS" "${EXTRA[@]}"
      fi
    done
  done
}
first() { arms gpt2 relu swiglu; }
second() { arms rope post modern; }
EXTRA=("$@")
for width in ${WIDTHS//,/ }; do  # every grid and rate known before anything trains
  for arm in "${!ARM[@]}"; do
    if stage seeds && [ -z "${SKIP_TRAIN:-}" ]; then
      lookup "RATE_${arm}_$width" RATE "${arm}_$width" > /dev/null
    fi
  done
  if stage tune && [ -z "${SKIP_TRAIN:-}" ]; then lookup "GRID_$width" GRID "$width" > /dev/null; fi
done
if [ -z "${SKIP_TRAIN:-}" ] && { stage tune || stage more || stage seeds; }; then
  streams first second
fi
# the cause of the GPT-2 block's slow start in this study's first version (cause.md): the block
# and its RoPE arm under μP from base width 32 at the rate transferred from there (0.011, the
# optimum of experiments/mup_transfer), and the μP block at width 256 over more steps
if [ -z "${SKIP_TRAIN:-}" ] && stage mup; then
  MUP=(model.param=mup model.mup_base_width=32 optim.lr=0.011)
  mup() {
    sweep mup_gpt2 "${MUP[@]}" model.d_model="$WIDTHS" seed="$SEEDS" "${EXTRA[@]}"
    sweep mup_longer "${MUP[@]}" model.d_model=256 seed=0 trainer.max_steps=800,1600 \
      "${EXTRA[@]}"
  }
  mup_rope() { sweep mup_rope "${MUP[@]}" model.pos=rope model.d_model="$WIDTHS" \
    seed="$SEEDS" "${EXTRA[@]}"; }
  streams mup mup_rope
fi
# the gate: the unmodified nanoGPT at the study's shape and budget, width 256
if [ -z "${SKIP_TRAIN:-}${PLAN:-}" ] && { [ "${STAGE:-}" = gate ] || [ -n "${GATE:-}" ]; }; then
  "$PY" "$HERE/../efficient_attention/nanogpt_gate.py" --out "$RUNS/gate/nanogpt.json" -- \
    --block_size=128 --batch_size=16 --n_embd=256 --n_head=4 --n_layer=2 --max_iters=400 \
    --lr_decay_iters=400 --learning_rate=0.00195 --min_lr=0.0 --warmup_iters=40 \
    --weight_decay=0.0 --grad_clip=0.0 --eval_interval=100 --log_interval=100 --eval_iters=16
fi
[ -n "${STAGE:-}" ] && exit 0
analysis_follows

# the analysis: every sweep is read from runs/ (or, while training, from where it was written)
GPT2="$(sweep_dir gpt2 "$BASE/gpt2")" RELU="$(sweep_dir relu "$BASE/relu")"
SWIGLU="$(sweep_dir swiglu "$BASE/swiglu")" ROPE="$(sweep_dir rope "$BASE/rope")"
POST="$(sweep_dir post "$BASE/post")" MODERN="$(sweep_dir modern "$BASE/modern")"
compare() { "$PY" -m attnlab.compare "$@"; }
{
  echo "Final validation loss of each arm at each rate of its grid (seed 100, 400 steps)."
  for arm in gpt2 relu swiglu rope post modern; do
    echo
    echo "## $arm${ARM[$arm]:+ (${ARM[$arm]})}"
    echo
    tuned=("$(sweep_dir "tune/$arm" "$BASE/tune/$arm")")
    more="$(sweep_dir "tune_more/$arm" "$BASE/tune_more/$arm")"
    [ -d "$more" ] && tuned+=("$more")
    compare "${tuned[@]}" --by model.d_model optim.lr --metric val/loss 2>/dev/null \
      | grep '^|'
  done
} > "$OUT/lr_grid.md"

width_tests() {  # width_tests KEY A B: KEY=A against KEY=B at each width, as --vs pairs in TESTS
  TESTS=()
  local width
  for width in ${WIDTHS//,/ }; do
    TESTS+=(--vs "$1=$2 model.d_model=$width" "$1=$3 model.d_model=$width")
  done
}
pair() {  # TITLE KEY A_SWEEP B_SWEEP A B PLOT
  echo "## $1"
  echo
  echo "Each block at each width (3 seeds a side, each at its own rate), Holm over the widths:"
  echo
  width_tests "$2" "$5" "$6"
  compare "$3" "$4" --by "$2" model.d_model --metric val/loss "${TESTS[@]}" \
    | grep '^Welch\|^In each line'
  echo
  # the fits of final values (every run's schedule ended) over the four widths, and the
  # multiplier; not the pooled test (dropped with the warning about it), which would pool four
  # widths that share their seeds
  compare "$3" "$4" --by "$2" --metric val/loss --fit final --multiplier "$5" "$6" \
    --plot "$OUT/$7" 2> >(grep -v '^warning: a test pools' >&2) \
    | sed -n '/^Scaling fit/,$p'
  echo
}
{
  pair "SwiGLU against ReLU (Shazeer 2020)" model.ffn "$RELU" "$SWIGLU" relu swiglu \
    fit_swiglu_relu.png
  pair "RoPE against learned positions (Su et al. 2021)" model.pos "$GPT2" "$ROPE" learned \
    rope fit_rope_learned.png
  pair "Pre-LN against Post-LN, both with warmup (Xiong et al. 2020)" model.norm "$POST" \
    "$GPT2" post pre fit_pre_post.png
  pair "The modern block (RMSNorm + RoPE + SwiGLU) against the GPT-2 block" model.norm_type \
    "$GPT2" "$MODERN" layernorm rmsnorm fit_modern_gpt2.png
} 2>&1 | grep -v '^wrote ' > "$OUT/results.md"
{
  echo "## Final validation loss per width, each arm at its rate"
  for arm in gpt2 relu swiglu rope post modern; do
    echo
    echo "### $arm"
    echo
    compare "$(sweep_dir "$arm" "$BASE/$arm")" --by model.d_model optim.lr --metric val/loss \
      2>/dev/null
  done
} >> "$OUT/results.md"

# the cause: the same blocks under μP from width 32 at the transferred rate, against SP at
# each width's own rate; and the μP block over more steps
MUP_GPT2="$(sweep_dir mup_gpt2 "$BASE/mup_gpt2")" MUP_ROPE="$(sweep_dir mup_rope "$BASE/mup_rope")"
MUP_LONGER="$(sweep_dir mup_longer "$BASE/mup_longer")"
cause() {  # TITLE SP_SWEEP MUP_SWEEP
  echo "## $1"
  echo
  width_tests model.param mup sp
  compare "$2" "$3" --by model.param model.d_model --metric val/loss "${TESTS[@]}" 2>/dev/null
  echo
}
{
  cause "Learned positions (the GPT-2 block): μP at 0.011 against SP at each width's rate" \
    "$GPT2" "$MUP_GPT2"
  cause "RoPE: μP at 0.011 against SP at each width's rate" "$ROPE" "$MUP_ROPE"
  echo "## The μP GPT-2 block at width 256 (seed 0) over more steps"
  echo
  compare "$MUP_LONGER" --by trainer.max_steps --metric val/loss 2>/dev/null | grep '^|'
} > "$OUT/cause.md"
# the gate: nanoGPT at the study's shape against the baseline at width 256
"$PY" "$HERE/gate.py" "$RUNS/gate/nanogpt.json" "$GPT2" > "$OUT/gate.md"
echo "wrote $OUT/lr_grid.md, results.md, cause.md, gate.md and plots"
