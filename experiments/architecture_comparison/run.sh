#!/usr/bin/env bash
# Encoder-decoder vs decoder-only (causal LM, prefix LM) vs encoder-only (Raffel et al. 2020, §3.2,
# Table 2), on two tasks, 3 seeds each, two jobs at a time with one thread each:
#   translation            Multi30k de→en: encdec 4+4, encdec 2+2, causal LM, prefix LM (12 runs)
#   translation_600steps   the same at a quarter of the budget (12 runs)
#   sst2                   SST-2: encoder-only, causal LM, prefix LM, encdec 4+4, encdec 2+2 (15 runs)
#   sst2_sentences         the same validated on whole held-out sentences, none of whose phrases
#                          trains (data.holdout=sentences; 15 runs)
#   sst2_rates             each SST-2 architecture's learning-rate grid on sentence validation, on
#                          tuning seeds that report nothing: SST2_RATES, then SST2_HIGH_RATES (the
#                          grid's top, added when optima sat at 3e-3; empty: none) × SST2_TUNE_SEEDS
#                          (40 runs in runs/sst2_rates and runs/sst2_rates_high)
#   sst2_tuned             the five at the rate each chose there, seeds 0–2 (15 runs; one sweep
#                          per rate, runs/sst2_tuned/lr<rate>)
#   translation_rates      the translation architectures' learning-rate grid on the tuning seed(s)
#                          TRANSLATION_TUNE_SEEDS: TRANSLATION_RATES, then TRANSLATION_HIGH_RATES,
#                          then TRANSLATION_TOP_RATES (20 runs in runs/translation_rates{,_high,_top})
#   translation_tuned      the four at the rate each chose there, seeds 0–2 (12 runs; one sweep
#                          per rate, runs/translation_tuned/lr<rate>)
#   reference              the translation gate from outside attnlab's model code: torch's
#                          nn.Transformer in the 4 + 4 baseline's setup (../reference_translation.py)
#                          at REFERENCE_RATES, seeds 0–2 (6 runs in runs/reference), tested
#                          against the baseline at the same rate and seeds (gate_reference.md)
#   reference_init         the diagnostic: the reference initialised as attnlab initialises
#                          (--init=attnlab) at the presets' 1e-3, seeds 0–2 (3 runs in
#                          runs/reference_init): is the gap at 1e-3 the initialisation?
#   reference_sst2         the SST-2 gate at the study's width: torch's nn.TransformerEncoder in
#                          the encoder-only baseline's setup (../reference_classification.py) at
#                          REFERENCE_SST2_RATES, seeds 0–2 (6 runs in runs/reference_sst2), tested
#                          against the baseline at the same rate and seeds (gate_reference_sst2.md);
#                          met when the baseline's mean test/acc is within 0.02 of the reference's
# saves their raw runs to runs/<part>, then writes results_<part>.md and the plots next to this
# script: the table (Student-t CIs), then every pair of architectures tested on the two metrics
# the README reads (Welch, Holm over the pairs of each metric), and gate.md.
#   attnlab-reproduce architecture_comparison --train   # this script: every part
#   attnlab-reproduce architecture_comparison --check   # the analysis of the committed runs
#   PART=sst2 experiments/architecture_comparison/run.sh          # one part
#   GATE=1 experiments/architecture_comparison/run.sh   # also the gate run (the 4 + 4
#                         encoder-decoder for 4 epochs, ≈ 11 min at one thread) into runs/gate
#   PART=translation TAG=_lr3e-3 …/run.sh optim.lr=3e-3  # a variant, in results_translation_lr3e-3.md
#   JOBS=1 experiments/architecture_comparison/run.sh trainer=gpu   # one GPU, one run at a time
# Extra arguments go to every training run of the parts chosen; TAG names the outputs (and the
# raw runs' folder) of such a variant so that the main tables are kept. SWEEP replaces a part's
# sweep folder; for the parts that train several sweeps (*_rates, *_tuned), it is the folder they
# are made in. JOBS, PLAN: see ../study.sh.
source "$(dirname "$0")/../study.sh"
no_corpus "Multi30k and SST-2"
SEEDS="${SEEDS:-0,1,2}"
TAG="${TAG:-}"
SST2_RATES="${SST2_RATES-3e-4,1e-3,3e-3}"
SST2_HIGH_RATES="${SST2_HIGH_RATES-1e-2}"
SST2_TUNE_SEEDS="${SST2_TUNE_SEEDS:-100,101}"
TRANSLATION_RATES="${TRANSLATION_RATES-3e-4,1e-3,3e-3}"
TRANSLATION_HIGH_RATES="${TRANSLATION_HIGH_RATES-1e-2}"
TRANSLATION_TOP_RATES="${TRANSLATION_TOP_RATES-3e-2}"
TRANSLATION_TUNE_SEEDS="${TRANSLATION_TUNE_SEEDS:-100}"
REFERENCE_RATES="${REFERENCE_RATES:-1e-3,3e-3}"  # the presets' rate and the baseline's tuned one
REFERENCE_SST2_RATES="${REFERENCE_SST2_RATES:-1e-3,3e-3}"  # the same for the SST-2 baseline
refuse_tuning_seeds "$SST2_TUNE_SEEDS" SST2_TUNE_SEEDS "$SEEDS" SEEDS
refuse_tuning_seeds "$TRANSLATION_TUNE_SEEDS" TRANSLATION_TUNE_SEEDS "$SEEDS" SEEDS

run_part() {  # name, experiments, metrics, metric for the curves' plot, second metric, overrides…
  local name="$1" experiments="$2" metrics="$3" curve="$4" second="$5"
  shift 5
  local sweep
  sweep="$(sweep_dir "$name" "${SWEEP:-logs/study_architectures/multiruns/${name}_$STAMP}")"
  local out="$OUT/results_${name}.md" first="${metrics%% *}"
  train_sweep "$name" "$sweep" experiment="$experiments" seed="$SEEDS" "${AT_ONCE[@]}" "$@"
  [ -z "${PLAN:-}" ] || return 0  # the analysis of this part follows
  # shellcheck disable=SC2086  # $metrics is a list of metric names
  "$PY" -m attnlab.compare "$sweep" --by experiment_name --metric $metrics \
      --plot "$OUT/${name}_val_loss.png" > "$out"
  for metric in "$first" "$second"; do  # every pair, Holm over the pairs of each metric
    echo
    "$PY" -m attnlab.compare "$sweep" --by experiment_name --metric "$metric" --all-pairs \
      | grep '^Welch\|^In each line'
  done >> "$out"
  "$PY" -m attnlab.compare "$sweep" --by experiment_name --curve-metric "$curve" \
      --plot "$OUT/${name}_${curve//\//_}.png" > /dev/null
  # the numbers behind that plot: the metric at every validation, mean ± std over seeds
  "$PY" "$HERE/curve_table.py" "$sweep" --metric "$curve" > "$OUT/curves_${name}.md"
  echo "wrote $out, curves_${name}.md and plots (runs: $sweep)"
}

rate_grid() {  # task, experiments, metrics, tuning seeds, rates, high rates, top rates, overrides…
  # every architecture × rate on the tuning seeds, in up to three sweeps, <task>_rates,
  # <task>_rates_high and <task>_rates_top (each added when optima sat at the grid's top so far;
  # a sweep whose rates are empty is skipped); rates.py reads each run at its best validation and
  # chooses, then every tuning run's metrics for the reading (not for the choice)
  local task="$1" experiments="$2" metrics="$3" seeds="$4" first="$5" high="$6" top="$7"
  shift 7
  local tuning=() grid name rates sweep
  for grid in "${task}_rates:$first" "${task}_rates_high:$high" "${task}_rates_top:$top"; do
    name="${grid%%:*}$TAG" rates="${grid#*:}"
    [ -n "$rates" ] || continue
    sweep="$(sweep_dir "$name" "${SWEEP:+$SWEEP/$name}")"
    sweep="${sweep:-logs/study_architectures/multiruns/${name}_$STAMP}"
    train_sweep "$name" "$sweep" experiment="$experiments" seed="$seeds" optim.lr="$rates" \
        "${AT_ONCE[@]}" "$@"
    tuning+=("$sweep")
  done
  if [ -z "${PLAN:-}" ]; then
    "$PY" "$HERE/rates.py" "${tuning[@]}" > "$OUT/rates_$task.md"
    echo >> "$OUT/rates_$task.md"
    # shellcheck disable=SC2086  # $metrics is a list of metric names
    "$PY" -m attnlab.compare "${tuning[@]}" --by experiment_name optim.lr --metric $metrics \
        >> "$OUT/rates_$task.md" 2> >(grep -v '^warning: ' >&2)
    echo "wrote rates_$task.md (runs: ${tuning[*]})"
  fi
}

tuned() {  # task, metrics, the two metrics of the pairs, the part at the presets' 1e-3, overrides…
  # the architectures at the rate each chose on the tuning seeds (as the tuning saved them), one
  # sweep per chosen rate into one parent folder, on SEEDS; then the table, every pair on the two
  # metrics (Holm over the pairs of each), and each architecture that moved against itself at
  # the presets' 1e-3 on the same seeds, on the first metric (Holm over those architectures)
  local task="$1" metrics="$2" pairs="$3" presets="$4"
  shift 4
  local tuning=() suffix choice parent rate experiments experiment metric out moved=()
  for suffix in "" _high _top; do
    if [ -d "$RUNS/${task}_rates$suffix$TAG" ]; then tuning+=("$RUNS/${task}_rates$suffix$TAG"); fi
  done
  choice="$("$PY" "$HERE/rates.py" --choose "${tuning[@]}")" || exit 2
  parent="$(sweep_dir "${task}_tuned$TAG" \
      "${SWEEP:-logs/study_architectures/multiruns/${task}_tuned${TAG}_$STAMP}")"
  while read -r rate experiments; do
    train_sweep "${task}_tuned$TAG/lr$rate" "$parent/lr$rate" experiment="$experiments" \
        seed="$SEEDS" optim.lr="$rate" "${AT_ONCE[@]}" "$@"
  done <<< "$choice"
  [ -z "${PLAN:-}" ] || return 0
  out="$OUT/results_${task}_tuned$TAG.md"
  # shellcheck disable=SC2086  # $metrics is a list of metric names
  "$PY" -m attnlab.compare "$parent" --by experiment_name optim.lr --metric $metrics > "$out"
  for metric in $pairs; do
    echo
    "$PY" -m attnlab.compare "$parent" --by experiment_name optim.lr --metric "$metric" \
        --all-pairs | grep '^Welch\|^In each line'
  done >> "$out"
  while read -r rate experiments; do
    [ "$rate" = 0.001 ] && continue
    for experiment in ${experiments//,/ }; do
      moved+=(--vs "$experiment optim.lr=$rate" "$experiment optim.lr=0.001")
    done
  done <<< "$choice"
  if [ "${#moved[@]}" -gt 0 ]; then
    echo
    "$PY" -m attnlab.compare "$parent" "$RUNS/$presets$TAG" --by experiment_name optim.lr \
        --metric "${pairs%% *}" "${moved[@]}" | grep '^Welch\|^In each line'
  fi >> "$out"
  echo "wrote $out (runs: $parent)"
}

TRANSLATION=(
  study_architectures_encdec,study_architectures_encdec_half,study_architectures_lm,study_architectures_prefix_lm
  "test/bleu val/bleu val/loss test/loss params tokens_per_sec" val/bleu val/loss
)
SST2=(
  study_architectures_sst2_encoder,study_architectures_sst2_lm,study_architectures_sst2_prefix_lm,study_architectures_sst2_encdec,study_architectures_sst2_encdec_half
  "test/acc val/acc test/loss params tokens_per_sec" val/acc val/acc
)
PART="${PART:-all}"
if [ "$PART" = all ] || [ "$PART" = translation ]; then
  run_part "translation$TAG" "${TRANSLATION[@]}" "$@"
fi
if [ "$PART" = all ] || [ "$PART" = translation_600steps ]; then
  run_part "translation_600steps$TAG" "${TRANSLATION[@]}" \
      trainer.max_steps=600 trainer.val_check_interval=100 "$@"
fi
if [ "$PART" = all ] || [ "$PART" = sst2 ]; then
  run_part "sst2$TAG" "${SST2[@]}" "$@"
fi
if [ "$PART" = all ] || [ "$PART" = sst2_sentences ]; then
  # ++: the sweep's base config, composed before any experiment is chosen, has no data.holdout
  run_part "sst2_sentences$TAG" "${SST2[@]}" ++data.holdout=sentences "$@"
fi
if [ "$PART" = all ] || [ "$PART" = sst2_rates ]; then
  rate_grid sst2 "${SST2[0]}" "test/acc val/acc" "$SST2_TUNE_SEEDS" "$SST2_RATES" \
      "$SST2_HIGH_RATES" "" ++data.holdout=sentences "$@"
fi
if [ "$PART" = all ] || [ "$PART" = sst2_tuned ]; then
  tuned sst2 "${SST2[1]}" "test/acc val/acc" sst2_sentences ++data.holdout=sentences "$@"
fi
if [ "$PART" = all ] || [ "$PART" = translation_rates ]; then
  rate_grid translation "${TRANSLATION[0]}" "test/bleu val/loss val/bleu" \
      "$TRANSLATION_TUNE_SEEDS" "$TRANSLATION_RATES" "$TRANSLATION_HIGH_RATES" \
      "$TRANSLATION_TOP_RATES" "$@"
fi
if [ "$PART" = all ] || [ "$PART" = translation_tuned ]; then
  tuned translation "${TRANSLATION[1]}" "test/bleu val/loss" translation "$@"
fi
reference_gate() {  # part, script, rates, experiment, the study's parts, metrics, overrides…
  local part="$1" script="$2" rates="$3" experiment="$4" study="$5" metrics="$6" folder rate seed
  shift 6
  # the reference on the baseline's data and settings, one run per rate and seed
  folder="$(sweep_dir "$part$TAG" "${SWEEP:-logs/study_architectures/multiruns/$part${TAG}_$STAMP}")"
  local runs=() settings=()
  for rate in ${rates//,/ }; do
    for seed in ${SEEDS//,/ }; do runs+=("seed=$seed optim.lr=$rate"); done
    settings+=("optim.lr=$(awk -v r="$rate" 'BEGIN { print r + 0 }')")  # 1e-3 as 0.001
  done
  train_references --script="$script" "$part$TAG" "$folder" "${runs[@]}" -- \
      experiment="$experiment" "$@"
  [ -z "${PLAN:-}" ] || return 0
  local out="$OUT/gate_$part$TAG.md"
  compare_reference --metrics="$metrics" "$out" "$RUNS/$part$TAG" "$experiment" optim.lr \
      "$study" "${settings[@]}"
  echo "wrote $out (runs: $folder)"
}

if [ "$PART" = all ] || [ "$PART" = reference ]; then
  reference_gate reference reference_translation.py "$REFERENCE_RATES" \
      study_architectures_encdec "$RUNS/translation$TAG $RUNS/translation_tuned$TAG" \
      "test/bleu val/loss" "$@"
fi
if [ "$PART" = all ] || [ "$PART" = reference_sst2 ]; then
  reference_gate reference_sst2 reference_classification.py "$REFERENCE_SST2_RATES" \
      study_architectures_sst2_encoder "$RUNS/sst2_sentences$TAG $RUNS/sst2_tuned$TAG" \
      "test/acc val/acc" ++data.holdout=sentences "$@"
fi
if [ "$PART" = all ] || [ "$PART" = reference_init ]; then
  runs=()
  for seed in ${SEEDS//,/ }; do runs+=("seed=$seed optim.lr=1e-3"); done
  train_references --init=attnlab "reference_init$TAG" "$(sweep_dir "reference_init$TAG" \
      "${SWEEP:-logs/study_architectures/multiruns/reference_init${TAG}_$STAMP}")" \
      "${runs[@]}" -- experiment=study_architectures_encdec "$@"
  if [ -z "${PLAN:-}" ]; then
    compare_reference_init "$OUT/gate_reference$TAG.md" "$RUNS/reference$TAG" \
        "$RUNS/reference_init$TAG" study_architectures_encdec optim.lr \
        "$RUNS/translation$TAG" optim.lr=0.001
    echo "wrote the diagnostic into $OUT/gate_reference$TAG.md"
  fi
fi

# the gate: the translation baseline (4 + 4 encoder-decoder) at multi30k_base's 4 epochs
if [ -n "${GATE:-}" ]; then
  train_sweep gate "logs/gates/architectures_encdec_4ep_$STAMP" \
      experiment=study_architectures_encdec trainer.max_steps=-1 trainer.max_epochs=4
fi
analysis_follows
# one run: its warning about fewer than 3 runs is dropped, any error still shows
"$PY" -m attnlab.compare "$RUNS/gate" --metric test/bleu val/bleu val/loss test/loss \
  > "$OUT/gate.md" 2> >(grep -v '^warning: ' >&2)
