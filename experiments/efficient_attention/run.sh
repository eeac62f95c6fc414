#!/usr/bin/env bash
# Efficient attention against full attention at equal steps, 3 seeds each (Beltagy et al. 2020;
# Zaheer et al. 2020; Katharopoulos et al. 2020; Arora et al. 2024 for MQAR; Shazeer 2019 and
# Ainslie et al. 2023 for MQA/GQA):
#   LM    Tiny Shakespeare (characters) in blocks of 1024: full, sliding_window, longformer,
#         bigbird, linear (linformer has no causal form), 15 runs, then MHA against GQA
#         (n_kv_heads=2) and MQA (1) on full attention, 6 more runs (MHA = the full runs)
#   MQAR  multi-query associative recall, 8 pairs behind a gap of 64: the same 5 kinds, 15 runs
# The two sweeps run side by side, one thread each (≈ 60 min on 2 cores); their raw runs are
# saved to runs/lm, runs/lm_kv and runs/mqar. Then the tables (results.md) and plots, and,
# when training or with MEASURE=1, cost.py's measurements (cost.md) on this machine.
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
if [ -z "${SKIP_TRAIN:-}" ]; then streams lm mqar "$@"; fi
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
"$PY" -m attnlab.compare "$LM" --by model.attention --curve-metric val/loss \
  --plot "$OUT/lm_val_loss.png" > /dev/null
"$PY" -m attnlab.compare "$MQAR" --by model.attention --curve-metric val/acc \
  --plot "$OUT/mqar_val_acc.png" > /dev/null
if measuring; then
  measure cost.py cost.md
fi
echo "wrote $OUT/results.md and plots (runs: $LM, $LM_KV, $MQAR)"
