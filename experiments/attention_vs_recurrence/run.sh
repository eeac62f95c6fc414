#!/usr/bin/env bash
# What does self-attention buy over the recurrent and convolutional encoder-decoders it replaced?
# (Vaswani et al. 2017, §6.1, Table 2; Gehring et al. 2017; Bahdanau et al. 2015, Fig. 2.)
# Multi30k de→en at equal training steps, 3 seeds each, in one sweep: the Transformer
# (multi30k_base's shape), LSTM + Bahdanau attention, LSTM + Luong attention (general, input
# feeding), an LSTM encoder-decoder without attention, and ConvS2S: 15 runs, two at a time with
# one thread each (≈ 45 min on 2 cores); their raw runs are saved to runs/sweep. Then the tables
# (results.md) and plots, and, when training or with MEASURE=1, throughput.md and decoding.md
# on this machine.
#   attnlab-reproduce attention_vs_recurrence --train    # this script
#   attnlab-reproduce attention_vs_recurrence --check    # the analysis of the committed runs
# Extra arguments go to every training run (trainer.max_steps=…).
source "$(dirname "$0")/../study.sh"
SEEDS="${SEEDS:-0,1,2}"
SWEEP="$(sweep_dir sweep "${SWEEP:-logs/study_recurrence/multiruns/$STAMP}")"
EXPERIMENTS=study_recurrence_transformer,study_recurrence_lstm_bahdanau,study_recurrence_lstm_luong,study_recurrence_lstm_none,study_recurrence_conv

# two jobs at a time, one thread each
OMP_NUM_THREADS=1 train_sweep sweep "$SWEEP" experiment="$EXPERIMENTS" seed="$SEEDS" \
  hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
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
"$PY" "$HERE/time_to_bleu.py" "$SWEEP" --bleu 3 5 10 >> "$OUT/results.md"
"$PY" "$HERE/bleu_by_length_plot.py" "$SWEEP" "$OUT/bleu_by_length.png"
if measuring; then
  measure throughput.py throughput.md
  measure decoding.py decoding.md
fi
echo "wrote $OUT/results.md and plots (runs: $SWEEP)"
