#!/usr/bin/env bash
# Efficient attention against full attention at equal steps, 3 seeds each (Beltagy et al. 2020;
# Zaheer et al. 2020; Katharopoulos et al. 2020; Arora et al. 2024 for MQAR; Shazeer 2019 and
# Ainslie et al. 2023 for MQA/GQA):
#   LM    Tiny Shakespeare (characters) in blocks of 1024: full, sliding_window, longformer,
#         bigbird, linear (linformer has no causal form), 15 runs, then MHA against GQA
#         (n_kv_heads=2) and MQA (1) on full attention, 6 more runs (MHA = the full runs)
#   MQAR  multi-query associative recall, 8 pairs behind a gap of 64: the same 5 kinds, 15 runs
# The two sweeps run side by side, one thread each (≈ 60 min on 2 cores), then cost.py measures
# memory, step time, KV-cache size and decoding speed side by side in one process.
# Writes results.md and the plots next to this script.
#   experiments/efficient_attention/run.sh
#   SWEEPS=logs/study_efficient SKIP_TRAIN=1 experiments/efficient_attention/run.sh
source "$(dirname "$0")/../study.sh"
SEEDS="${SEEDS:-0,1,2}"
SWEEPS="${SWEEPS:-logs/study_efficient/$STAMP}"
KINDS=full,sliding_window,longformer,bigbird,linear

lm() {
  train_sweep "$SWEEPS/lm" experiment=study_efficient_lm seed="$SEEDS" model.attention=$KINDS "$@"
  train_sweep "$SWEEPS/lm_kv" experiment=study_efficient_lm seed="$SEEDS" model.n_kv_heads=2,1 "$@"
}
mqar() {
  train_sweep "$SWEEPS/mqar" experiment=study_efficient_mqar seed="$SEEDS" model.attention=$KINDS "$@"
}
OMP_NUM_THREADS=1 lm "$@" > /dev/null & OMP_NUM_THREADS=1 mqar "$@" > /dev/null & wait

{
  echo "## Language model: Tiny Shakespeare, blocks of 1024 characters, 600 steps"
  echo
  "$PY" -m attnlab.compare "$SWEEPS/lm" --by model.attention --vs-best \
    --metric val/loss tokens_per_sec params
  echo
  echo "## MQAR: 8 key-value pairs, a gap of 64, 8 queries (96 tokens), 2000 steps"
  echo
  "$PY" -m attnlab.compare "$SWEEPS/mqar" --by model.attention --vs-best \
    --metric val/acc test/acc val/loss tokens_per_sec
  echo
  echo "## MHA, GQA and MQA on the language model (full attention)"
  echo
  # the MHA runs are the full-attention runs of the first sweep
  mapfile -t MHA < <(grep -l '"model.attention=full"' "$SWEEPS"/lm/*/summary.json | xargs -n1 dirname)
  "$PY" -m attnlab.compare "$SWEEPS/lm_kv" "${MHA[@]}" --by model.n_kv_heads --vs-best \
    --metric val/loss tokens_per_sec params
  echo
  echo "## Cost, side by side in one process"
  echo
  "$PY" "$HERE/cost.py"
} > "$HERE/results.md"
"$PY" -m attnlab.compare "$SWEEPS/lm" --by model.attention --curve-metric val/loss \
  --plot "$HERE/lm_val_loss.png" > /dev/null
"$PY" -m attnlab.compare "$SWEEPS/mqar" --by model.attention --curve-metric val/acc \
  --plot "$HERE/mqar_val_acc.png" > /dev/null
echo "wrote $HERE/results.md and plots (runs: $SWEEPS)"
