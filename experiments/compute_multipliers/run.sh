#!/usr/bin/env bash
# Block ablations as compute multipliers over 4 widths × 2 seeds (Kaplan et al. 2020;
# Hoffmann et al. 2022, approach 1): SwiGLU vs ReLU (Shazeer 2020), RoPE vs learned positions
# (Su et al. 2021), Pre-LN vs Post-LN with warmup (Xiong et al. 2020), and the "modern" block
# (RMSNorm + RoPE + SwiGLU) against the GPT-2 block (the Mamba paper's Transformer++ vs
# Transformer, Gu & Dao 2023, Fig. 4). Six sweeps of 8 runs, in two streams of one thread
# each (≈ 35 min on 2 cores), saved to runs/<variant>. Then results.md (each pair's frontier
# fits and compute multiplier with CIs) and one frontier plot per pair.
#   attnlab-reproduce compute_multipliers --train    # this script
#   attnlab-reproduce compute_multipliers --check    # the analysis of the committed runs
source "$(dirname "$0")/../study.sh"
BASE="${SWEEP:-logs/study_compute_multipliers/$STAMP}"
GRID=(experiment=study_compute_multipliers model.d_model=32,64,128,256 seed=0,1,2)
GPT2="$(sweep_dir gpt2 "$BASE/gpt2")" RELU="$(sweep_dir relu "$BASE/relu")"
SWIGLU="$(sweep_dir swiglu "$BASE/swiglu")" ROPE="$(sweep_dir rope "$BASE/rope")"
POST="$(sweep_dir post "$BASE/post")" MODERN="$(sweep_dir modern "$BASE/modern")"

first() {
  train_sweep gpt2 "$GPT2" "${GRID[@]}" "$@"
  train_sweep relu "$RELU" "${GRID[@]}" model.ffn=relu "$@"
  train_sweep swiglu "$SWIGLU" "${GRID[@]}" model.ffn=swiglu "$@"
}
second() {
  train_sweep rope "$ROPE" "${GRID[@]}" model.pos=rope "$@"
  train_sweep post "$POST" "${GRID[@]}" model.norm=post "$@"
  train_sweep modern "$MODERN" "${GRID[@]}" model.norm_type=rmsnorm model.pos=rope \
    model.ffn=swiglu "$@"
}
if [ -z "${SKIP_TRAIN:-}" ]; then
  OMP_NUM_THREADS=1 first "$@" > /dev/null & OMP_NUM_THREADS=1 second "$@" > /dev/null & wait
fi

pair() {  # TITLE KEY A_SWEEP B_SWEEP A B PLOT
  echo "## $1"
  echo
  "$PY" -m attnlab.compare "$3" "$4" --by "$2" --metric val/loss params --fit \
    --multiplier "$5" "$6" --plot "$OUT/$7"
  echo
}
{
  pair "SwiGLU against ReLU (Shazeer 2020)" model.ffn "$RELU" "$SWIGLU" relu swiglu \
    frontier_swiglu_relu.png
  pair "RoPE against learned positions (Su et al. 2021)" model.pos "$GPT2" "$ROPE" learned \
    rope frontier_rope_learned.png
  pair "Pre-LN against Post-LN, both with warmup (Xiong et al. 2020)" model.norm "$POST" \
    "$GPT2" post pre frontier_pre_post.png
  pair "The modern block (RMSNorm + RoPE + SwiGLU) against the GPT-2 block" model.norm_type \
    "$GPT2" "$MODERN" layernorm rmsnorm frontier_modern_gpt2.png
} 2>&1 | grep -v '^wrote ' > "$OUT/results.md"
