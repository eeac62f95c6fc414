#!/usr/bin/env bash
# Block ablations as compute multipliers over 4 widths × 3 seeds (Kaplan et al. 2020;
# Hoffmann et al. 2022, approach 1): SwiGLU vs ReLU (Shazeer 2020), RoPE vs learned positions
# (Su et al. 2021), Pre-LN vs Post-LN with warmup (Xiong et al. 2020), and the "modern" block
# (RMSNorm + RoPE + SwiGLU) against the GPT-2 block (the Mamba paper's Transformer++ vs
# Transformer, Gu & Dao 2023, Fig. 4). Six sweeps of 12 runs, in two streams of one thread
# each (≈ 90 min on 2 cores), saved to runs/<variant>. Then results.md (each pair's frontier
# fits and compute multiplier with CIs, and each sweep's final loss per width) and one
# frontier plot per pair. GATE=1 also runs the gate (nanoGPT at the study's shape).
#   attnlab-reproduce compute_multipliers --train    # this script
#   attnlab-reproduce compute_multipliers --check    # the analysis of the committed runs
# WIDTHS and SEEDS default to the committed study's; extra arguments go to every training run
# (optim.lr=…, trainer.max_steps=…); JOBS=1 runs the two streams one after the other, CORPUS
# trains on a corpus from attnlab-prepare (../study.sh; the README's "Rerun on GPUs").
source "$(dirname "$0")/../study.sh"
WIDTHS="${WIDTHS:-32,64,128,256}"
SEEDS="${SEEDS:-0,1,2}"

# the gate: the unmodified nanoGPT at the study's shape and budget, width 256 (GATE=1)
if [ -n "${GATE:-}" ]; then
  "$PY" "$HERE/../efficient_attention/nanogpt_gate.py" --out "$RUNS/gate/nanogpt.json" -- \
    --block_size=128 --batch_size=16 --n_embd=256 --n_head=4 --n_layer=2 --max_iters=400 \
    --lr_decay_iters=400 --learning_rate=0.00195 --min_lr=0.0 --warmup_iters=40 \
    --weight_decay=0.0 --grad_clip=0.0 --eval_interval=100 --log_interval=100 --eval_iters=16
fi
BASE="${SWEEP:-logs/study_compute_multipliers/$STAMP}"
GRID=(experiment=study_compute_multipliers model.d_model="$WIDTHS" seed="$SEEDS"
      "${CORPUS_ARGS[@]}")
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
if [ -z "${SKIP_TRAIN:-}" ]; then streams first second "$@"; fi
analysis_follows

pair() {  # TITLE KEY A_SWEEP B_SWEEP A B PLOT
  echo "## $1"
  echo
  # the table over all 12 runs of each block and the fits; not its test (dropped with the
  # warning about it), which would pool four widths that share their seeds
  "$PY" -m attnlab.compare "$3" "$4" --by "$2" --metric val/loss params --fit \
    --multiplier "$5" "$6" --plot "$OUT/$7" 2> >(grep -v '^warning: a test pools' >&2) \
    | grep -v '^Welch\|^In each line'
  echo "A against B at each width (3 seeds a side), Holm over the four widths:"
  echo
  local width tests=()
  for width in ${WIDTHS//,/ }; do
    tests+=(--vs "$2=$5 model.d_model=$width" "$2=$6 model.d_model=$width")
  done
  "$PY" -m attnlab.compare "$3" "$4" --by "$2" model.d_model --metric val/loss "${tests[@]}" \
    | grep '^Welch\|^In each line'
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
# the gate's numbers: nanoGPT's loss and the baseline trained longer (runs/gate_longer)
"$PY" "$HERE/gate.py" "$RUNS" > "$OUT/gate.md"
per_width() {  # NAME SWEEP
  echo "### $1"
  echo
  "$PY" -m attnlab.compare "$2" --by model.d_model --metric val/loss
  echo
}
{
  echo "## Final validation loss per width, each sweep"
  echo
  per_width gpt2 "$GPT2"
  per_width relu "$RELU"
  per_width swiglu "$SWIGLU"
  per_width rope "$ROPE"
  per_width post "$POST"
  per_width modern "$MODERN"
} >> "$OUT/results.md"
