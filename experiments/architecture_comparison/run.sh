#!/usr/bin/env bash
# Encoder-decoder vs decoder-only (causal LM, prefix LM) vs encoder-only (Raffel et al. 2020, §3.2,
# Table 2), on two tasks, 3 seeds each:
#   translation  Multi30k de→en: encdec 4+4, encdec 2+2, causal LM, prefix LM (12 runs)
#   sst2         SST-2 sentiment: encoder-only, causal LM, prefix LM, encdec 4+4, encdec 2+2 (15 runs)
# then writes results_<part><TAG>.md and the plots next to this script: the table (bootstrap CIs),
# then every pair of architectures tested on the two metrics the README reads (Welch, Holm over
# the pairs of each metric).
#   experiments/architecture_comparison/run.sh                    # both parts, one job at a time
#   experiments/architecture_comparison/run.sh hydra/launcher=joblib hydra.launcher.n_jobs=2
#   PART=sst2 experiments/architecture_comparison/run.sh          # one part
#   PART=sst2 SWEEP=logs/…/multiruns/<existing> SKIP_TRAIN=1 …/run.sh   # re-tabulate only
#   PART=translation TAG=_600steps …/run.sh trainer.max_steps=600 trainer.val_check_interval=100
# Extra arguments go to every training run (a launcher, trainer.max_steps=…); TAG names the outputs
# of such a variant so that the main tables are kept.
source "$(dirname "$0")/../study.sh"
SEEDS="${SEEDS:-0,1,2}"
TAG="${TAG:-}"

run_part() {  # part, experiments, metrics, metric for the curves' plot, second metric to test
  local part="$1" experiments="$2" metrics="$3" curve="$4" second="$5"
  local sweep
  sweep="$(sweep_dir "${part}${TAG}" "${SWEEP:-logs/study_architectures/multiruns/${part}${TAG}_$STAMP}")"
  local out="$OUT/results_${part}${TAG}.md" first="${metrics%% *}"
  train_sweep "${part}${TAG}" "$sweep" experiment="$experiments" seed="$SEEDS" "${EXTRA[@]}"
  # shellcheck disable=SC2086  # $metrics is a list of metric names
  "$PY" -m attnlab.compare "$sweep" --by experiment_name --metric $metrics \
      --plot "$OUT/${part}${TAG}_val_loss.png" > "$out"
  for metric in "$first" "$second"; do  # every pair, Holm over the pairs of each metric
    echo
    "$PY" -m attnlab.compare "$sweep" --by experiment_name --metric "$metric" --all-pairs \
      | grep '^Welch\|^In each line'
  done >> "$out"
  "$PY" -m attnlab.compare "$sweep" --by experiment_name --curve-metric "$curve" \
      --plot "$OUT/${part}${TAG}_${curve//\//_}.png" > /dev/null
  echo "wrote $out and plots (runs: $sweep)"
}

EXTRA=("$@")
PART="${PART:-all}"
if [ "$PART" = all ] || [ "$PART" = translation ]; then
  run_part translation \
    study_architectures_encdec,study_architectures_encdec_half,study_architectures_lm,study_architectures_prefix_lm \
    "test/bleu val/bleu val/loss test/loss params tokens_per_sec" val/bleu val/loss
fi
if [ "$PART" = all ] || [ "$PART" = sst2 ]; then
  run_part sst2 \
    study_architectures_sst2_encoder,study_architectures_sst2_lm,study_architectures_sst2_prefix_lm,study_architectures_sst2_encdec,study_architectures_sst2_encdec_half \
    "test/acc val/acc test/loss params tokens_per_sec" val/acc val/acc
fi
