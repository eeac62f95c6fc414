#!/usr/bin/env bash
# Pre-LN vs Post-LN × warmup × peak learning rate on Multi30k de→en (Xiong et al. 2020, §3.2).
# Runs the sweep (36 runs: 12 settings × 3 seeds, two at a time with one thread each) and the
# grid widened at both edges (WIDE: 24 runs), saves their raw runs to runs/sweep and runs/wide,
# then the gate from outside attnlab's model code — torch's nn.Transformer
# (../reference_translation.py) at the baseline's setting and at Post-LN's, seeds SEEDS (6 runs
# in runs/reference), and the same initialised as attnlab initialises (--init=attnlab, 6 runs in
# runs/reference_init: does the initialisation explain the gap?) and with only its Q/K/V change
# (--init=qkv, 6 runs in runs/reference_qkv: which change does?) — then writes results.md (with
# grad_ratio.py's gradient-ratio table), gate_reference.md and the plots next to this script.
#   attnlab-reproduce preln_vs_postln_warmup --train    # this script
#   attnlab-reproduce preln_vs_postln_warmup --check    # the analysis of the committed runs
#   SEEDS=0,1 experiments/preln_vs_postln_warmup/run.sh          # fewer seeds
#   GATE=1 experiments/preln_vs_postln_warmup/run.sh   # also the gate run (the baseline for
#                                           4 epochs, ≈ 10 min at one thread) into runs/gate
#   JOBS=1 WARMUP=360 LRS=2.5e-4,5e-4,1e-3,2e-3,4e-3 WIDE= experiments/preln_vs_postln_warmup/run.sh \
#       trainer=gpu trainer.max_steps=3600
#                                           # on one GPU, one run at a time (README: Rerun on GPUs)
# Extra arguments go to every training run (trainer.max_steps=…); WARMUP is the warmup arm's
# steps (50: 10 % of the 500-step run), LRS the peak rates, WIDE the widened grid's (empty:
# none). STAGE=wide trains the widened grid alone, STAGE=reference the reference runs alone,
# STAGE=reference_init and STAGE=reference_qkv the diagnostics alone.
# JOBS, PLAN: see ../study.sh.
source "$(dirname "$0")/../study.sh"
no_corpus Multi30k
SEEDS="${SEEDS:-0,1,2}"
WARMUP="${WARMUP:-50}"
LRS="${LRS:-5e-4,1e-3,2e-3}"
# the grid widened at both edges (Post-LN's best rate was LRS's lowest, Pre-LN's its
# highest), trained as a second sweep into runs/wide; empty for none
WIDE="${WIDE-2.5e-4,4e-3}"
WIDE_SWEEP="$(sweep_dir wide "${SWEEP:-logs/study_preln_postln/multiruns/$STAMP}_wide")"
SWEEP="$(sweep_dir sweep "${SWEEP:-logs/study_preln_postln/multiruns/$STAMP}")"
SWEEPS=("$SWEEP")
[ -z "$WIDE" ] || SWEEPS+=("$WIDE_SWEEP")

# diverged Post-LN runs are an expected outcome here; JOBS at once (default 2, one thread each)
# (STAGE=wide trains the widened grid only: the study ran in these two pieces)
if [ -z "${STAGE:-}" ]; then
  train_sweep sweep "$SWEEP" experiment=study_preln_postln \
      model.norm=pre,post optim.warmup_steps=0,"$WARMUP" optim.lr="$LRS" seed="$SEEDS" \
      "${AT_ONCE[@]}" "$@"
fi
if [ -n "$WIDE" ] && { [ -z "${STAGE:-}" ] || [ "$STAGE" = wide ]; }; then
  train_sweep wide "$WIDE_SWEEP" experiment=study_preln_postln \
      model.norm=pre,post optim.warmup_steps=0,"$WARMUP" optim.lr="$WIDE" seed="$SEEDS" \
      "${AT_ONCE[@]}" "$@"
fi
# the gate from outside attnlab's model code: nn.Transformer at the baseline's setting (Pre-LN,
# warmup WARMUP, lr 1e-3) and at Post-LN's, on SEEDS
REFERENCE_SETTINGS=("model.norm=pre optim.warmup_steps=$WARMUP optim.lr=0.001"
                    "model.norm=post optim.warmup_steps=$WARMUP optim.lr=0.001")
runs=()
for setting in "${REFERENCE_SETTINGS[@]}"; do
  for seed in ${SEEDS//,/ }; do runs+=("$setting seed=$seed"); done
done
if [ -z "${STAGE:-}" ] || [ "$STAGE" = reference ]; then
  train_references reference "logs/study_preln_postln/multiruns/${STAMP}_reference" "${runs[@]}" \
      -- experiment=study_preln_postln "$@"
fi
if [ -z "${STAGE:-}" ] || [ "$STAGE" = reference_init ]; then
  train_references --init=attnlab reference_init \
      "logs/study_preln_postln/multiruns/${STAMP}_reference_init" "${runs[@]}" \
      -- experiment=study_preln_postln "$@"
fi
if [ -z "${STAGE:-}" ] || [ "$STAGE" = reference_qkv ]; then
  train_references --init=qkv reference_qkv \
      "logs/study_preln_postln/multiruns/${STAMP}_reference_qkv" "${runs[@]}" \
      -- experiment=study_preln_postln "$@"
fi

# the gate: the baseline (Pre-LN, warmup 50, lr 1e-3) at multi30k_base's budget of 4 epochs
if [ -n "${GATE:-}" ]; then
  train_sweep gate "logs/gates/preln_baseline_4ep_$STAMP" \
    experiment=study_preln_postln model.norm=pre optim.warmup_steps="$WARMUP" optim.lr=1e-3 \
    trainer.max_steps=-1 trainer.max_epochs=4
fi
[ -n "${STAGE:-}" ] && exit 0
analysis_follows
# one run: its warning about fewer than 3 runs is dropped, any error still shows
"$PY" -m attnlab.compare "$RUNS/gate" --metric test/bleu val/bleu val/loss test/loss \
  > "$OUT/gate.md" 2> >(grep -v '^warning: ' >&2)

BY=(--by model.norm optim.warmup_steps optim.lr)
"$PY" -m attnlab.compare "${SWEEPS[@]}" "${BY[@]}" --metric test/bleu val/bleu val/loss \
    test/loss --vs-best --plot "$OUT/val_loss.png" > "$OUT/results.md"
{  # the same tests on val/loss
  "$PY" -m attnlab.compare "${SWEEPS[@]}" "${BY[@]}" --metric val/loss --vs-best | grep '^Welch'
  # two families of planned comparisons per metric, each Holm over its ten tests: warmup
  # against none for Post-LN and for Pre-LN at each peak rate; Pre-LN against Post-LN in
  # each setting (one test per setting, never pooled over settings that share seeds)
  setting() { echo "model.norm=$1 optim.warmup_steps=$2 optim.lr=$3"; }
  WITH_WARMUP=() NORM=()
  # the rates as the tables spell them (5e-4: 0.0005)
  for lr in $("$PY" -c 'import sys; print(*sorted(float(r) for r in ",".join(sys.argv[1:]).split(",") if r))' "$LRS" "$WIDE"); do
    for norm in post pre; do
      WITH_WARMUP+=(--vs "$(setting "$norm" "$WARMUP" "$lr")" "$(setting "$norm" 0 "$lr")")
    done
    for warmup in 0 "$WARMUP"; do
      NORM+=(--vs "$(setting pre "$warmup" "$lr")" "$(setting post "$warmup" "$lr")")
    done
  done
  planned() {  # METRIC --vs A B ...: the tests and the legend that says Holm over them
    echo
    "$PY" -m attnlab.compare "${SWEEPS[@]}" "${BY[@]}" --metric "$@" | grep '^Welch\|^In each line'
  }
  for metric in test/bleu val/loss; do
    planned "$metric" "${WITH_WARMUP[@]}"
    planned "$metric" "${NORM[@]}"
  done
  # §3.3: the gradient ratio at initialisation and during training (read from metrics.csv)
  echo
  "$PY" "$HERE/grad_ratio.py" "${SWEEPS[@]}"
} >> "$OUT/results.md"
"$PY" -m attnlab.compare "${SWEEPS[@]}" "${BY[@]}" --curve-metric train/loss \
    --plot "$OUT/train_loss.png" > /dev/null
"$PY" -m attnlab.compare "${SWEEPS[@]}" "${BY[@]}" --curve-metric diag/grad_ratio_last_first \
    --plot "$OUT/grad_ratio.png" > /dev/null
compare_reference "$OUT/gate_reference.md" "$RUNS/reference" study_preln_postln \
    "model.norm optim.warmup_steps optim.lr" "${SWEEPS[*]}" "${REFERENCE_SETTINGS[@]}"
compare_reference_init "$OUT/gate_reference.md" "$RUNS/reference" "$RUNS/reference_init" \
    study_preln_postln "model.norm optim.warmup_steps optim.lr" "${SWEEPS[*]}" \
    "${REFERENCE_SETTINGS[@]}"
{  # which change: only Q/K/V drawn apart (torch's biases kept) against torch's initialisation,
   # then against attnlab's (both changes); Holm over the settings
  REF_BY=(--by experiment_name model.norm optim.warmup_steps optim.lr)
  echo
  "$PY" -m attnlab.compare "$RUNS/reference_qkv" "${REF_BY[@]}" \
      --metric test/bleu val/loss params 2> >(grep -v '^warning: ' >&2) | grep '^|'
  for against in "experiment_name=reference_study_preln_postln" \
      "reference_study_preln_postln_attnlab_init"; do
    mapfile -t qkv < <(vs_pairs "reference_study_preln_postln_qkv_init" "$against" \
        "${REFERENCE_SETTINGS[@]}")
    echo
    "$PY" -m attnlab.compare "$RUNS/reference" "$RUNS/reference_init" "$RUNS/reference_qkv" \
        "${REF_BY[@]}" --metric val/loss "${qkv[@]}" | grep '^Welch\|^In each line'
  done
} >> "$OUT/gate_reference.md"
echo "wrote $OUT/results.md, gate_reference.md, val_loss.png, train_loss.png, grad_ratio.png" \
    "(runs: $SWEEP)"
