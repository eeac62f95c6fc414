#!/usr/bin/env bash
# What does self-attention buy over recurrence with attention? (Vaswani et al. 2017, §6.1,
# Table 2; Bahdanau et al. 2015, Fig. 2.) Multi30k de→en at equal training steps, 3 seeds each:
#   the Transformer (multi30k_base's shape), LSTM + Bahdanau attention, LSTM + Luong attention
#   (general, input feeding), and an LSTM encoder-decoder without attention: 12 runs.
# Writes results.md and the plots next to this script.
#   experiments/attention_vs_recurrence/run.sh                  # one job at a time (≈ 70 min, 2 cores)
#   SWEEP=logs/…/multiruns/<existing> SKIP_TRAIN=1 experiments/attention_vs_recurrence/run.sh
# Extra arguments go to every training run (a launcher, trainer.max_steps=…).
source "$(dirname "$0")/../study.sh"
SEEDS="${SEEDS:-0,1,2}"
SWEEP="$(sweep_dir sweep "${SWEEP:-logs/study_recurrence/multiruns/$STAMP}")"
EXPERIMENTS=study_recurrence_transformer,study_recurrence_lstm_bahdanau,study_recurrence_lstm_luong,study_recurrence_lstm_none

train_sweep sweep "$SWEEP" experiment="$EXPERIMENTS" seed="$SEEDS" "$@"
BUCKETS="test/bleu_len_01-10 test/bleu_len_11-15 test/bleu_len_16-20 test/bleu_len_21-25 test/bleu_len_26+"
# shellcheck disable=SC2086  # metric lists
"$PY" -m attnlab.compare "$SWEEP" --by experiment_name --vs-best \
  --metric test/bleu val/bleu test/loss params tokens_per_sec > "$OUT/results.md"
{
  echo
  echo "BLEU by source length (test_2016_flickr, words; counts: n_len_*):"
  echo
  "$PY" -m attnlab.compare "$SWEEP" --by experiment_name --metric $BUCKETS
} >> "$OUT/results.md"
"$PY" -m attnlab.compare "$SWEEP" --by experiment_name --curve-metric val/bleu \
  --plot "$OUT/val_bleu.png" > /dev/null
"$PY" -m attnlab.compare "$SWEEP" --by experiment_name --curve-metric val/loss \
  --plot "$OUT/val_loss.png" > /dev/null
"$PY" "$HERE/time_to_bleu.py" "$SWEEP" >> "$OUT/results.md"
"$PY" "$HERE/bleu_by_length_plot.py" "$SWEEP" "$OUT/bleu_by_length.png"
if measuring; then
  { "$PY" -m attnlab.studies --machine; echo; "$PY" "$HERE/throughput.py"; } > "$OUT/throughput.md"
fi
echo "wrote $OUT/results.md and plots (runs: $SWEEP)"
