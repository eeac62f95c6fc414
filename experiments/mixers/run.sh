#!/usr/bin/env bash
# Token mixers, early training, 3 seeds per arm (Arora et al. 2024 for MQAR; Dao & Gu 2024;
# Yang et al. 2025; Katharopoulos et al. 2020; Beltagy et al. 2020; Gemma Team 2025; DeepSeek-AI
# 2024; Ainslie et al. 2023; Shazeer et al. 2017):
#   MQAR  experiment=study_mixers_mqar: multi-query associative recall, 8 pairs, 800 steps, at
#         widths 32 and 64: softmax (full), a sliding window of 8, linear attention, Mamba-2,
#         Gated DeltaNet and a hybrid of three windowed layers to one global
#   LM    experiment=study_mixers_lm: Tiny Shakespeare (characters), 500 steps: multi-head
#         attention (the dense baseline), grouped-query (2 key-value heads) and latent attention
#         at the same cache bytes, a mixture of experts at the same active parameters, a sliding
#         window of 64 and the hybrid of three windowed layers to one global
# Every arm first gets its own learning-rate grid (tuning seed 100, which reports nothing; MQAR at
# width 64, which width 32 reuses), then three fresh seeds at the grid's best rate (RATE below).
#   attnlab-reproduce mixers --train    # this script (about 1 h 30 on 2 idle cores)
#   attnlab-reproduce mixers --check    # the analysis of the committed runs
# STAGE=tune|more|seeds|flops|long runs one stage, ONLY=ARM one arm (the study ran in these pieces).
# JOBS, CORPUS (the language model's arms only) and PLAN as experiments/study.sh says.
source "$(dirname "$0")/../study.sh"
SEEDS="${SEEDS:-0,1,2}"
WIDTHS="${WIDTHS:-32,64}"
RATES="${RATES:-1e-3,3e-3,1e-2,3e-2}"
export ATTNLAB_DATA_ROOT="${ATTNLAB_DATA_ROOT:-data}"

MQAR=(experiment=study_mixers_mqar)
LM=(experiment=study_mixers_lm)
declare -A ARM=(
  [mqar_full]="${MQAR[*]} model.attention=full"
  [mqar_sliding_window]="${MQAR[*]} model.attention=sliding_window model.window=8"
  [mqar_linear]="${MQAR[*]} model.attention=linear"
  [mqar_mamba2]="${MQAR[*]} model.attention=mamba2 model.pos=none model.ssm_state=16"
  [mqar_gated_deltanet]="${MQAR[*]} model.attention=gated_deltanet model.pos=none"
  [mqar_hybrid]="${MQAR[*]} model.attention=hybrid model.layer_pattern=[sliding_window*3,full] model.window=8"
  [lm_mha]="${LM[*]}"
  [lm_gqa]="${LM[*]} model.n_kv_heads=2"
  [lm_mla]="${LM[*]} model.attention=mla model.kv_latent_rank=56 model.rope_head_dim=8"
  [lm_moe]="${LM[*]} model.ffn=moe model.d_ff=128 model.moe_experts=4 model.moe_top_k=2"
  [lm_sliding_window]="${LM[*]} model.attention=sliding_window model.window=64"
  [lm_hybrid]="${LM[*]} model.attention=hybrid model.layer_pattern=[sliding_window*3,full] model.window=64"
)
MQAR_ARMS=(mqar_full mqar_sliding_window mqar_linear mqar_mamba2 mqar_gated_deltanet mqar_hybrid)
LM_ARMS=(lm_mha lm_gqa lm_mla lm_moe lm_sliding_window lm_hybrid)
ARMS=("${MQAR_ARMS[@]}" "${LM_ARMS[@]}")

sweep() {  # sweep NAME ARM OVERRIDE...: one sweep of arm ARM, JOBS runs at a time
  local name="$1" arm="$2" corpus=()
  shift 2
  [ "${arm#lm_}" != "$arm" ] && corpus=("${CORPUS_ARGS[@]}")  # the language model's arms
  # shellcheck disable=SC2086  # the arm's overrides are words
  train_sweep "$name" "$(sweep_dir "$name" "logs/study_mixers/multiruns/${name}_$STAMP")" \
    ${ARM[$arm]} experiment_name="$arm" test=false "${AT_ONCE[@]}" "${corpus[@]}" "$@"
}
# the grids widened downwards, where the best rate was the grid's lower edge
declare -A MORE=(
  [mqar_sliding_window]=1e-4,3e-4
  [mqar_linear]=1e-4,3e-4
  [mqar_mamba2]=1e-4,3e-4
  [mqar_gated_deltanet]=1e-4,3e-4
  [mqar_hybrid]=1e-4,3e-4
)
stage() { [ -z "${STAGE:-}" ] || [ "$STAGE" = "$1" ]; }
for arm in "${ARMS[@]}"; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$arm" ] && continue
  if stage tune; then sweep "tune_$arm" "$arm" optim.lr="$RATES" seed=100 "$@"; fi
  if stage more && [ -n "${MORE[$arm]:-}" ]; then
    sweep "tune_${arm}_more" "$arm" optim.lr="${MORE[$arm]}" seed=100 "$@"
  fi
done

# each arm's best rate in its grid (lr_grid.md)
declare -A RATE=(
  [mqar_full]=3e-3
  [mqar_sliding_window]=1e-3
  [mqar_linear]=1e-3
  [mqar_mamba2]=3e-4
  [mqar_gated_deltanet]=3e-4
  [mqar_hybrid]=3e-4
  [lm_mha]=1e-2
  [lm_gqa]=1e-2
  [lm_mla]=1e-2
  [lm_moe]=3e-3
  [lm_sliding_window]=1e-2
  [lm_hybrid]=1e-2
)
for arm in "${ARMS[@]}"; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$arm" ] && continue
  stage seeds || continue
  width=()
  [ "${arm#mqar_}" != "$arm" ] && width=(model.d_model="$WIDTHS")
  sweep "$arm" "$arm" optim.lr="${RATE[$arm]}" seed="$SEEDS" "${width[@]}" "$@"
done
# equal training FLOPs by schedule: each LM arm trains for the steps in which it spends what the
# sliding window's 500 steps spend (500 × the window's FLOPs a token / the arm's, from
# results.md), its cosine ending there, at its grid's rate; the window's own runs are lm_sliding_window
declare -A FLOP_STEPS=([lm_mha]=371 [lm_gqa]=387 [lm_mla]=328 [lm_moe]=370 [lm_hybrid]=460)
for arm in "${LM_ARMS[@]}"; do
  [ -n "${ONLY:-}" ] && [ "$ONLY" != "$arm" ] && continue
  { stage flops && [ -n "${FLOP_STEPS[$arm]:-}" ]; } || continue
  sweep "${arm}_flops" "$arm" optim.lr="${RATE[$arm]}" seed="$SEEDS" \
    trainer.max_steps="${FLOP_STEPS[$arm]}" "$@"
done
# the gate's check: softmax attention with five times the steps (seed 0, width 64), against
# Zoology's "attention solves MQAR"
if stage long && { [ -z "${ONLY:-}" ] || [ "$ONLY" = mqar_full ]; }; then
  sweep long_mqar_full mqar_full optim.lr="${RATE[mqar_full]}" seed=0 trainer.max_steps=4000 "$@"
fi
[ -n "${ONLY:-}${STAGE:-}" ] && exit 0
analysis_follows

# the analysis: every sweep is read from runs/ (or, while training, where it was written)
sweeps() { for s in "$@"; do sweep_dir "$s" "$RUNS/$s"; done; }
mapfile -t TUNE_MQAR < <(for arm in "${MQAR_ARMS[@]}"; do sweeps "tune_$arm"; done
                         for arm in "${!MORE[@]}"; do sweeps "tune_${arm}_more"; done)
mapfile -t TUNE_LM < <(for arm in "${LM_ARMS[@]}"; do sweeps "tune_$arm"; done)
mapfile -t SEEDED_MQAR < <(sweeps "${MQAR_ARMS[@]}")
mapfile -t SEEDED_LM < <(sweeps "${LM_ARMS[@]}")
mapfile -t FLOPS_LM < <(for arm in "${!FLOP_STEPS[@]}"; do sweeps "${arm}_flops"; done
                        sweeps lm_sliding_window)
compare() { "$PY" -m attnlab.compare "$@" 2>/dev/null; }
{
  echo "## MQAR, width 64: recall accuracy after 800 steps"
  echo
  compare "${TUNE_MQAR[@]}" --by experiment_name optim.lr --metric val/acc val/loss
  echo
  echo "## Language model: validation loss after 500 steps"
  echo
  compare "${TUNE_LM[@]}" --by experiment_name optim.lr --metric val/loss
} > "$OUT/lr_grid.md"

# what each arm keeps to decode (shapes only: random weights, nothing timed)
STATE=()
for arm in "${ARMS[@]}"; do STATE+=(--arm "$arm" "${ARM[$arm]}"); done
"$PY" "$HERE/state.py" --widths "$WIDTHS" "${STATE[@]}" > "$OUT/state.md" 2>/dev/null

# equal training FLOPs: every LM run read where the cheapest run ended
BUDGET="$("$PY" -c 'import json, pathlib, sys
spent = [json.loads(p.read_text())["flops"] for d in sys.argv[1:]
         for p in pathlib.Path(d).rglob("summary.json")]
print(f"{min(spent) * 0.999:.4e}")  # inside every last validation' "${SEEDED_LM[@]}")"
mqar_vs() { for arm in sliding_window linear mamba2 gated_deltanet hybrid; do
  echo --vs "experiment_name=mqar_$arm" "experiment_name=mqar_full"; done
  echo --vs "experiment_name=mqar_hybrid" "experiment_name=mqar_sliding_window"; }
lm() { echo "experiment_name=lm_$1"; }
LM_VS=(--vs "$(lm gqa)" "$(lm mha)" --vs "$(lm mla)" "$(lm mha)" --vs "$(lm mla)" "$(lm gqa)"
       --vs "$(lm moe)" "$(lm mha)" --vs "$(lm hybrid)" "$(lm mha)"
       --vs "$(lm hybrid)" "$(lm sliding_window)")
{
  for width in ${WIDTHS//,/ }; do
    echo "## MQAR, width $width: recall accuracy after 800 steps"
    echo
    # shellcheck disable=SC2046  # the pairs are words
    compare "${SEEDED_MQAR[@]}" --filter model.d_model="$width" --by experiment_name \
      --metric val/acc val/loss flops_per_token params $(mqar_vs)
    echo
  done
  echo "## Language model at equal training FLOPs, each schedule ending there"
  echo
  compare "${FLOPS_LM[@]}" --by experiment_name --metric val/loss flops "${LM_VS[@]}"
  echo
  echo "## Language model at equal training FLOPs ($BUDGET), read on the 500-step curves"
  echo
  compare "${SEEDED_LM[@]}" --by experiment_name --metric val/loss --at flops="$BUDGET" \
    "${LM_VS[@]}"
  echo
  echo "## Language model after 500 steps: parameters and FLOPs"
  echo
  compare "${SEEDED_LM[@]}" --by experiment_name --metric val/loss params flops_per_token flops
} > "$OUT/results.md"
LONG="$(sweeps long_mqar_full)"
{
  echo "## Softmax attention on MQAR with 4000 steps (seed 0, width 64, its rate)"
  echo
  compare "$LONG" --by experiment_name --metric val/acc val/loss
  echo
  # a model that answers each query with a value of the context not yet asked, uniformly,
  # without reading which key was asked: 1/8 for the first query, … 1/1 for the last
  "$PY" -c 'n = 8; print(f"The elimination level (no recall): H_{n}/{n} = "
                         f"{sum(1 / k for k in range(1, n + 1)) / n:.3f}")'
  echo
  echo "Half way, at step 2000:"
  echo
  compare "$LONG" --by experiment_name --metric val/acc --at step=2000
} > "$OUT/gate.md"
compare "${SEEDED_MQAR[@]}" --filter model.d_model=64 --by experiment_name --curve-metric val/acc \
  --plot "$OUT/mqar_val_acc.png" > /dev/null
compare "${SEEDED_LM[@]}" --by experiment_name --x flops --plot "$OUT/lm_val_loss.png" > /dev/null
echo "wrote $OUT/lr_grid.md, state.md, results.md, gate.md and plots"
