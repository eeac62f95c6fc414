#!/usr/bin/env bash
# Efficient attention against full attention at equal steps, 3 seeds each (Beltagy et al. 2020;
# Zaheer et al. 2020; Katharopoulos et al. 2020; Arora et al. 2024 for MQAR; Shazeer 2019 and
# Ainslie et al. 2023 for MQA/GQA):
#   LM    Tiny Shakespeare (characters) in blocks of 1024: full, sliding_window, longformer,
#         bigbird, linear (linformer has no causal form), 15 runs, then MHA against GQA
#         (n_kv_heads=2) and MQA (1) on full attention, 6 more runs (MHA = the full runs)
#   MQAR  multi-query associative recall, 8 pairs behind a gap of 64: the same 5 kinds, 15 runs
# The two sweeps run side by side, one thread each (≈ 60 min on 2 cores); their raw runs are
# saved to runs/lm, runs/lm_kv and runs/mqar. Then on the LM each kind's rate grid on tuning
# seed 100 (runs/lm_tune*, runs/lm_linear_abs_tune*: linear attention in Katharopoulos et al.'s
# form too), each kind on the sweep's seeds at its best rate (runs/lm_best_*,
# runs/lm_linear_abs_best*), MQAR's rate grid on the tuning seed (runs/mqar_tune), GQA and MQA
# at MHA's parameter count (runs/lm_kv*_matched), and full attention and the window with their
# loss per context length (runs/lm_context). Then the tables (results.md, lr_grid.md,
# mqar_tuned.md, tuned.md, kv_matched.md, context.md) and plots, and, when training or with
# MEASURE=1, cost.py's measurements (cost.md) on this machine.
#   attnlab-reproduce efficient_attention --train    # this script
#   attnlab-reproduce efficient_attention --check    # the analysis of the committed runs
# Extra arguments go to every training run (trainer=gpu, trainer.max_steps=…); JOBS=1 runs the
# two streams one after the other, CORPUS trains the LM sweeps on a corpus from attnlab-prepare
# (MQAR keeps its own data; ../study.sh; the README's "Rerun on GPUs").
source "$(dirname "$0")/../study.sh"
SEEDS="${SEEDS:-0,1,2}"
BASE="${SWEEP:-logs/study_efficient/$STAMP}"
KINDS=full,sliding_window,longformer,bigbird,linear
# the sparse kinds' own keys, read by the kinds that take them (full and linear read none)
LM_SPARSE="model.window=128 model.n_global=1 model.attn_block=64 model.n_random=2"
MQAR_SPARSE="model.window=32 model.n_global=1 model.attn_block=16 model.n_random=2"
LM="$(sweep_dir lm "$BASE/lm")" LM_KV="$(sweep_dir lm_kv "$BASE/lm_kv")"
MQAR="$(sweep_dir mqar "$BASE/mqar")"
LM_TUNE="$(sweep_dir lm_tune "$BASE/lm_tune")"
LM_TUNE_HIGH="$(sweep_dir lm_tune_high "$BASE/lm_tune_high")"
LM_TUNE_TOP="$(sweep_dir lm_tune_top "$BASE/lm_tune_top")"
LM_CONTEXT="$(sweep_dir lm_context "$BASE/lm_context")"
LM_BEST_HIGH="$(sweep_dir lm_best_3.2e-2 "$BASE/lm_best_3.2e-2")"
LM_BEST_LOW="$(sweep_dir lm_best_1.6e-2 "$BASE/lm_best_1.6e-2")"
POSITIONS="task.loss_by_position=[64,128,256,512]"
LM_LINEAR_TUNE="$(sweep_dir lm_linear_abs_tune "$BASE/lm_linear_abs_tune")"
LM_LINEAR_HIGH="$(sweep_dir lm_linear_abs_tune_high "$BASE/lm_linear_abs_tune_high")"
LM_LINEAR_TOP="$(sweep_dir lm_linear_abs_tune_top "$BASE/lm_linear_abs_tune_top")"
LM_LINEAR_TOPMOST="$(sweep_dir lm_linear_abs_tune_topmost "$BASE/lm_linear_abs_tune_topmost")"
LM_LINEAR_BEST="$(sweep_dir lm_linear_abs_best "$BASE/lm_linear_abs_best")"
LM_LINEAR_BELOW="$(sweep_dir lm_linear_abs_best_below "$BASE/lm_linear_abs_best_below")"
LM_GQA_MATCHED="$(sweep_dir lm_kv2_matched "$BASE/lm_kv2_matched")"
LM_MQA_MATCHED="$(sweep_dir lm_kv1_matched "$BASE/lm_kv1_matched")"
MQAR_TUNE="$(sweep_dir mqar_tune "$BASE/mqar_tune")"
MQAR_BEST_LINEAR="$(sweep_dir mqar_best_linear "$BASE/mqar_best_linear")"

lm() {
  train_sweep lm "$LM" experiment=study_efficient_lm seed="$SEEDS" model.attention=$KINDS \
    $LM_SPARSE "${CORPUS_ARGS[@]}" "$@"
  train_sweep lm_kv "$LM_KV" experiment=study_efficient_lm seed="$SEEDS" model.n_kv_heads=2,1 \
    "${CORPUS_ARGS[@]}" "$@"
}
mqar() {
  train_sweep mqar "$MQAR" experiment=study_efficient_mqar seed="$SEEDS" model.attention=$KINDS \
    $MQAR_SPARSE "$@"
}
if [ -z "${SKIP_TRAIN:-}" ] && [ -z "${STAGE:-}" ]; then streams lm mqar "$@"; fi
# each kind's own rate on the language model, on tuning seed 100, which reports nothing; the
# grid was widened upwards in stages while a kind's best sat at its top (TUNE= empty: none)
kinds_grid() {  # NAME SWEEP RATES [OVERRIDE...]: every kind at RATES
  train_sweep "$1" "$2" experiment=study_efficient_lm seed=100 model.attention=$KINDS \
    optim.lr="$3" $LM_SPARSE "${AT_ONCE[@]}" "${CORPUS_ARGS[@]}" "${@:4}"
}
# linear attention in Katharopoulos et al.'s form: no rotation of φ(q), φ(k), sinusoidal
# positions added to the input instead
linear_abs() {  # NAME SWEEP SEEDS RATES [OVERRIDE...]
  train_sweep "$1" "$2" experiment=study_efficient_lm seed="$3" model.attention=linear \
    model.pos=sinusoidal optim.lr="$4" "${AT_ONCE[@]}" "${CORPUS_ARGS[@]}" "${@:5}"
}
stage() { [ -n "${TUNE-1}" ] && { [ -z "${STAGE:-}" ] || [ "$STAGE" = "$1" ]; }; }
# 1e-3, 2e-3 (the sweep's) and 4e-3 (STAGE=tune)
if stage tune; then kinds_grid lm_tune "$LM_TUNE" 1e-3,2e-3,4e-3 "$@"; fi
# 8e-3 and 1.6e-2, where every kind's best was 4e-3 (STAGE=tune_high)
if stage tune_high; then kinds_grid lm_tune_high "$LM_TUNE_HIGH" 8e-3,1.6e-2 "$@"; fi
# 3.2e-2 and 6.4e-2 for every kind and for the Katharopoulos form, where 1.6e-2 was best again
# (STAGE=tune_top)
if stage tune_top; then
  kinds_grid lm_tune_top "$LM_TUNE_TOP" 3.2e-2,6.4e-2 "$@"
  linear_abs lm_linear_abs_tune_top "$LM_LINEAR_TOP" 100 3.2e-2,6.4e-2 "$@"
fi
# the Katharopoulos form at 1e-3 … 4e-3, then higher where 4e-3 was its best (STAGE=tune_linear)
if stage tune_linear; then
  linear_abs lm_linear_abs_tune "$LM_LINEAR_TUNE" 100 1e-3,2e-3,4e-3 "$@"
  linear_abs lm_linear_abs_tune_high "$LM_LINEAR_HIGH" 100 8e-3,1.6e-2 "$@"
fi
# the Katharopoulos form at 1.28e-1 and 2.56e-1, where 6.4e-2 was its best (STAGE=tune_linear_top)
if stage tune_linear_top; then
  linear_abs lm_linear_abs_tune_topmost "$LM_LINEAR_TOPMOST" 100 1.28e-1,2.56e-1 "$@"
fi
# each kind at its best rate on the tuning seed (lr_grid.md; inside the grid), on the sweep's
# seeds: 3.2e-2 for full attention, the sliding window and BigBird, 1.6e-2 for Longformer and
# linear attention (STAGE=best; TUNE= empty: none)
if stage best; then
  train_sweep lm_best_3.2e-2 "$LM_BEST_HIGH" experiment=study_efficient_lm seed="$SEEDS" \
    model.attention=full,sliding_window,bigbird optim.lr=3.2e-2 model.window=128 \
    model.attn_block=64 model.n_random=2 "${AT_ONCE[@]}" \
    "${CORPUS_ARGS[@]}" "$@"
  train_sweep lm_best_1.6e-2 "$LM_BEST_LOW" experiment=study_efficient_lm seed="$SEEDS" \
    model.attention=longformer,linear optim.lr=1.6e-2 model.window=128 model.n_global=1 \
    "${AT_ONCE[@]}" "${CORPUS_ARGS[@]}" "$@"
fi
# the Katharopoulos form at its best rate on the tuning seed, 6.4e-2 (1.28e-1 diverged), on the
# sweep's seeds (STAGE=best_linear), then one step below, 3.2e-2, where 6.4e-2 diverged on one
# of them (STAGE=best_linear_below; TUNE= empty: neither)
if stage best_linear; then linear_abs lm_linear_abs_best "$LM_LINEAR_BEST" "$SEEDS" 6.4e-2 "$@"; fi
if stage best_linear_below; then
  linear_abs lm_linear_abs_best_below "$LM_LINEAR_BELOW" "$SEEDS" 3.2e-2 "$@"
fi
# MQAR's rate grid on tuning seed 100 for the kinds that can reach the pairs (full, BigBird,
# linear; the windowed kinds cannot see past their window, at any rate): 1e-3 … 3e-2, the
# sweep's 3e-3 among them (STAGE=mqar_tune; TUNE= empty: none)
if stage mqar_tune; then
  train_sweep mqar_tune "$MQAR_TUNE" experiment=study_efficient_mqar seed=100 \
    model.attention=full,bigbird,linear optim.lr=1e-3,3e-3,1e-2,3e-2 model.attn_block=16 \
    model.n_random=2 "${AT_ONCE[@]}" "$@"
fi
# then linear attention on the sweep's seeds at its best there, 1e-2 (full attention's and
# BigBird's best is the sweep's 3e-3, whose runs are runs/mqar; STAGE=mqar_best)
if stage mqar_best; then
  train_sweep mqar_best_linear "$MQAR_BEST_LINEAR" experiment=study_efficient_mqar \
    seed="$SEEDS" model.attention=linear optim.lr=1e-2 "${AT_ONCE[@]}" "$@"
fi
# GQA and MQA at MHA's parameter count: the FFN widened by what the K/V projections lose
# (2·64·32 weights and 32 biases a layer for GQA, 2·64·48 and 48 for MQA; d_ff 288 and 304
# give 104,576 and 104,544 parameters against MHA's 104,640; STAGE=kv_matched)
if [ -z "${STAGE:-}" ] || [ "$STAGE" = kv_matched ]; then
  train_sweep lm_kv2_matched "$LM_GQA_MATCHED" experiment=study_efficient_lm seed="$SEEDS" \
    model.n_kv_heads=2 model.d_ff=288 "${AT_ONCE[@]}" "${CORPUS_ARGS[@]}" "$@"
  train_sweep lm_kv1_matched "$LM_MQA_MATCHED" experiment=study_efficient_lm seed="$SEEDS" \
    model.n_kv_heads=1 model.d_ff=304 "${AT_ONCE[@]}" "${CORPUS_ARGS[@]}" "$@"
fi
# the context gate: full attention and the sliding window again on the LM's seeds, each
# validation's loss also per context-length bucket (the same training as runs/lm: the buckets
# are read, not trained on; STAGE=context: these alone)
if [ -z "${STAGE:-}" ] || [ "$STAGE" = context ]; then
  train_sweep lm_context "$LM_CONTEXT" experiment=study_efficient_lm seed="$SEEDS" \
    model.attention=full,sliding_window model.window=128 "$POSITIONS" "${AT_ONCE[@]}" \
    "${CORPUS_ARGS[@]}" "$@"
fi
[ -n "${STAGE:-}" ] && exit 0
analysis_follows

{
  # the committed setup, or the corpus and the arguments it was given
  lm_data="Tiny Shakespeare, blocks of 1024 characters"
  if [ -n "${CORPUS:-}" ]; then lm_data="$CORPUS, blocks of 1024 tokens"; fi
  echo "## Language model: $lm_data, 600 steps${*:+ (with $*)}"
  echo
  "$PY" -m attnlab.compare "$LM" --by model.attention --vs-best \
    --metric val/loss tokens_per_sec params
  echo
  echo "Each kind against full attention (planned; Holm over these 4):"
  echo
  "$PY" -m attnlab.compare "$LM" --by model.attention --metric val/loss \
    --vs sliding_window full --vs longformer full --vs bigbird full --vs linear full \
    | grep '^Welch\|^In each line'
  echo
  echo "## MQAR: 8 key-value pairs, a gap of 64, 8 queries (96 tokens), 2000 steps${*:+ (with $*)}"
  echo
  "$PY" -m attnlab.compare "$MQAR" --by model.attention --vs-best \
    --metric val/acc test/acc val/loss tokens_per_sec
  echo
  echo "## MHA, GQA and MQA on the language model (full attention)"
  echo
  # the MHA runs are the full-attention runs of the first sweep
  "$PY" -m attnlab.compare "$LM_KV" "$LM" --filter model.attention=full --by model.n_kv_heads \
    --vs-best --metric val/loss tokens_per_sec params
} > "$OUT/results.md"
# the gates' numbers from runs/gate: nanoGPT's LM loss; the MQAR long run, where that gate
# would be met
"$PY" "$HERE/gates.py" "$RUNS/gate" > "$OUT/gate.md"
# each kind's rate grid on the tuning seed (one run a point: the warning about fewer than 3
# runs is dropped, any error still shows)
if [ -n "${TUNE-1}" ]; then
  { echo "Each kind's rate on the language model, tuning seed 100 alone (n = 1 a point; the"
    echo "three-seed comparison above is at 2e-3). linear with model.pos=sinusoidal: linear"
    echo "attention in Katharopoulos et al.'s form (positions added to the input, φ not rotated)."
    echo
    "$PY" -m attnlab.compare "$LM_TUNE" "$LM_TUNE_HIGH" "$LM_TUNE_TOP" "$LM_LINEAR_TUNE" \
      "$LM_LINEAR_HIGH" "$LM_LINEAR_TOP" "$LM_LINEAR_TOPMOST" --by model.attention model.pos optim.lr \
      --metric val/loss 2> >(grep -v '^warning: ' >&2)
  } > "$OUT/lr_grid.md"
fi
# MQAR's rate grid on the tuning seed (one run a point, as lr_grid.md), then BigBird and linear
# attention at their best rates against full attention at its own, seeds 0-2 (Holm over the 2)
if [ -n "${TUNE-1}" ]; then
  { echo "MQAR's rate for the kinds that can reach the pairs, tuning seed 100 alone (n = 1 a"
    echo "point):"
    echo
    "$PY" -m attnlab.compare "$MQAR_TUNE" --by model.attention optim.lr \
      --metric val/acc val/loss 2> >(grep -v '^warning: ' >&2)
    echo
    echo "Each at its best rate there, seeds 0, 1, 2 (full attention and BigBird at 3e-3: the"
    echo "sweep's runs, shown with the rest of that sweep; linear attention at 1e-2), against full"
    echo "attention (Welch, Holm over the 2):"
    echo
    "$PY" -m attnlab.compare "$MQAR" "$MQAR_BEST_LINEAR" --by model.attention optim.lr \
      --metric val/acc test/acc --vs bigbird full --vs optim.lr=0.01 full
  } > "$OUT/mqar_tuned.md"
fi
# each kind against full attention at each one's best rate (Holm over the 4)
if [ -n "${TUNE-1}" ]; then
  { echo "Each kind at its best rate on the tuning seed (lr_grid.md), seeds 0, 1, 2, against full"
    echo "attention at its own (Welch, Holm over the 4):"
    echo
    "$PY" -m attnlab.compare "$LM_BEST_HIGH" "$LM_BEST_LOW" --by model.attention optim.lr \
      --metric val/loss --vs sliding_window full --vs longformer full --vs bigbird full \
      --vs linear full
    echo
    echo "Linear attention's two forms on seeds 0, 1, 2: with rotary positions on φ(q), φ(k) (the"
    echo "study's, model.pos=rope) at its best rate on the tuning seed, and in Katharopoulos et"
    echo "al.'s form (model.pos=sinusoidal) at its best, 6.4e-2, and one step below (Holm over 2):"
    echo
    "$PY" -m attnlab.compare "$LM_BEST_LOW" "$LM_LINEAR_BEST" "$LM_LINEAR_BELOW" \
      --filter model.attention=linear --by model.pos optim.lr --metric val/loss \
      --vs optim.lr=0.064 rope --vs optim.lr=0.032 rope
  } > "$OUT/tuned.md"
fi
# the context gate and full attention against the window in each context-length bucket, then
# the loss per bucket of both
{ "$PY" "$HERE/context_gate.py" "$LM_CONTEXT"
  echo
  echo "Validation loss per context-length bucket (tokens of context a prediction reads):"
  echo
  "$PY" -m attnlab.compare "$LM_CONTEXT" --by model.attention --metric val/loss_pos_001-064 \
    val/loss_pos_065-128 val/loss_pos_129-256 val/loss_pos_257-512 val/loss_pos_513+
} > "$OUT/context.md"
# MHA against GQA and MQA at its parameter count (the FFN widened; Holm over the 2)
{ echo "MHA against GQA and MQA at MHA's parameter count (d_ff 288 and 304 instead of 256),"
  echo "seeds 0, 1, 2, at the sweep's rate 2e-3 (MHA: the full-attention LM runs):"
  echo
  "$PY" -m attnlab.compare "$LM_GQA_MATCHED" "$LM_MQA_MATCHED" "$LM" \
    --filter model.attention=full --by model.n_kv_heads model.d_ff --vs-best \
    --metric val/loss params
} > "$OUT/kv_matched.md"
"$PY" -m attnlab.compare "$LM" --by model.attention --curve-metric val/loss \
  --plot "$OUT/lm_val_loss.png" > /dev/null
"$PY" -m attnlab.compare "$MQAR" --by model.attention --curve-metric val/acc \
  --plot "$OUT/mqar_val_acc.png" > /dev/null
if measuring; then
  measure cost.py cost.md
fi
echo "wrote $OUT/results.md, lr_grid.md, mqar_tuned.md, tuned.md, context.md, kv_matched.md and plots (runs: $LM, $LM_KV, $MQAR)"
