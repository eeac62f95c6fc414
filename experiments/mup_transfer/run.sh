#!/usr/bin/env bash
# μP learning-rate transfer (Yang et al. 2022, "Tensor Programs V", Fig. 1): a 2-layer decoder
# on Tiny Shakespeare (characters) at widths 16, 32, 64, 128, 256 and learning rates 2^-11 …
# 2^-4 (×2 apart; 2^-3 and 2^-2 too at width 16, whose SP optimum is higher), under SP and
# under μP (base width 32), seeds 0, 1, 2: 252 runs of 400 steps. They were made in stages,
# each a sweep per parametrisation (the arms function below): seed 0 at widths 32–256 (two
# sweeps), width 16 on the three seeds, seeds 1 and 2 at widths 32–256, width 16's two higher
# rates. The two parametrisations train side by side, one thread each (≈ 2 h 15 on 2 cores);
# their raw runs are saved to runs/{sp,mup}{,_high,_narrow,_seeds,_narrow_high}. Then μP's
# multipliers tuned at the base width and μP at the choice on every width (STAGE=tune, tuned
# below; ≈ 45 min more): runs/mup_{tune,tune_seeds,tuned,tuned_high}. Then transfer.md (final
# validation loss per width and learning rate, averaged over seeds; the best learning rate
# per width and its drift; each seed's optimum, with 95 % t intervals and the planned tests of
# the slopes), transfer.png, and tuned.md and tuned.png (the tuning, the tuned transfer and
# its planned tests).
#   attnlab-reproduce mup_transfer --train    # this script
#   attnlab-reproduce mup_transfer --check    # the analysis of the committed runs
#   GATE=1 experiments/mup_transfer/run.sh      # also the gate (nanoGPT at the study's shape)
# WIDTHS, LRS and LRS_HIGH (the two learning-rate sweeps), SEEDS (the first seed), MORE_SEEDS,
# NARROW and NARROW_HIGH (below), and BASE_WIDTH (μP's) default to the committed study's; extra
# arguments go to every training run (trainer.max_steps=…);
# JOBS=1 runs SP's and μP's sweeps one after the other, CORPUS trains on a corpus from
# attnlab-prepare (../study.sh; the README's "Rerun on GPUs" has the command).
source "$(dirname "$0")/../study.sh"

# the gate: the unmodified nanoGPT at the study's shape and budget, width 256 (GATE=1)
if [ -n "${GATE:-}" ]; then
  "$PY" "$HERE/../efficient_attention/nanogpt_gate.py" --out "$RUNS/gate/nanogpt.json" -- \
    --block_size=128 --batch_size=16 --n_embd=256 --n_head=4 --n_layer=2 --max_iters=400 \
    --lr_decay_iters=400 --learning_rate=0.00195 --min_lr=0.0 --warmup_iters=40 \
    --weight_decay=0.0 --grad_clip=0.0 --eval_interval=100 --log_interval=100 --eval_iters=16
fi
BASE="${SWEEP:-logs/study_mup_transfer/$STAMP}"
WIDTHS="${WIDTHS:-32,64,128,256}"
LRS="${LRS:-0.000488,0.000977,0.00195,0.00391,0.00781,0.0156}"
LRS_HIGH="${LRS_HIGH:-0.0313,0.0625}"
BASE_WIDTH="${BASE_WIDTH:-32}"
MORE_SEEDS="${MORE_SEEDS-1,2}" NARROW="${NARROW-16}" NARROW_HIGH="${NARROW_HIGH-0.125,0.25}"
# μP's base multipliers tuned at the base width (Tensor Programs V's procedure): α_output
# (TUNE_OUT), α_attn (TUNE_ATTN) and the rate (TUNE_LRS) on the tuning seeds, which report
# nothing, TUNE_SEED then TUNE_MORE_SEEDS, a sweep each (STAGE=tune); then μP with the chosen
# multipliers at every width, NARROW's and the grid's, at TUNED_LRS, on every reporting seed
# (STAGE=tuned). The choice is the best cell of the tuning runs in runs/mup_tune{,_seeds}
# (tuned.md's "Chosen"; a PLAN shows the committed tuning's), or TUNED_OUT and TUNED_ATTN when
# both are given. TUNE_OUT= empty: without these two stages.
TUNE_SEED="${TUNE_SEED:-100}" TUNE_MORE_SEEDS="${TUNE_MORE_SEEDS-101}"
TUNE_OUT="${TUNE_OUT-0.25,0.5,1,2,4,8}"
TUNE_ATTN="${TUNE_ATTN:-0.5,1,2,4}" TUNE_LRS="${TUNE_LRS:-0.00391,0.00781,0.0156,0.0313,0.0625}"
TUNED_LRS="${TUNED_LRS:-0.00195,0.00391,0.00781,0.0156,0.0313,0.0625}"
TUNED_HIGH="${TUNED_HIGH-0.125}"  # a second sweep above: one seed's best was TUNED_LRS' top
case "${STAGE:-}" in
  '' | more | narrow_high | tune | tuned) ;;
  *) echo "error: STAGE=$STAGE is not a stage of this study: give more, narrow_high, tune or" \
       "tuned, or leave it unset" >&2
     exit 2 ;;
esac
FIRST_SEEDS="${SEEDS:-0}"
ALL_SEEDS="$FIRST_SEEDS${MORE_SEEDS:+,$MORE_SEEDS}"  # the NARROW widths run on every seed
for seed in ${FIRST_SEEDS//,/ }; do  # a seed in both would train its runs twice
  case ",$MORE_SEEDS," in *",$seed,"*)
    echo "error: seed $seed is in both SEEDS and MORE_SEEDS: give the first seed in SEEDS and" \
      "the others in MORE_SEEDS" >&2
    exit 2 ;;
  esac
done
TUNE_SEEDS="$TUNE_SEED${TUNE_MORE_SEEDS:+,$TUNE_MORE_SEEDS}"
refuse_tuning_seeds "$TUNE_SEEDS" "TUNE_SEED, TUNE_MORE_SEEDS" "$ALL_SEEDS" "SEEDS, MORE_SEEDS"
# a parametrisation's sweeps, by name: the first seed's grid (sp, sp_high), the widths below
# μP's base (sp_narrow, sp_narrow_high) and the grid's further seeds (sp_seeds); likewise mup_*
sweeps() {  # PARAM: the sweeps its tables read, the ones this run trains or trained
  local names=("$1" "$1_high")
  if [ -n "$NARROW" ]; then names+=("$1_narrow"); fi
  if [ -n "$NARROW" ] && [ -n "$NARROW_HIGH" ]; then names+=("$1_narrow_high"); fi
  if [ -n "$MORE_SEEDS" ]; then names+=("$1_seeds"); fi
  local name
  for name in "${names[@]}"; do sweep_dir "$name" "$BASE/$name"; done
}

grid() {  # PARAM NAME WIDTHS LRS SEEDS [OVERRIDE...] (SEEDS empty: the config's, 0)
  local base=()  # μP's own key: its base width (SP reads none)
  if [ "$1" = mup ]; then base=(model.mup_base_width="$BASE_WIDTH"); fi
  local seeds=()
  if [ -n "$5" ]; then seeds=(seed="$5"); fi
  train_sweep "$2" "$(sweep_dir "$2" "$BASE/$2")" experiment=study_mup_transfer \
    model.param="$1" model.d_model="$3" optim.lr="$4" "${seeds[@]}" "${base[@]}" \
    "${CORPUS_ARGS[@]}" "${@:6}"
}
at() { [ -z "${STAGE:-}" ] || [ "$STAGE" = "$1" ]; }  # STAGE: that stage's sweeps alone
# one parametrisation's sweeps, in the order the committed runs were made: the grid on the
# first seed (SEEDS, the config's 0 when unset), as two sweeps (LRS, then LRS_HIGH); the widths
# in NARROW (below μP's base) on that seed and MORE_SEEDS; then every width of the grid on
# MORE_SEEDS, at every rate of both sweeps (STAGE=more: these two alone); then the NARROW
# widths at NARROW_HIGH, where the narrowest SP model's best rate was the grid's top
# (STAGE=narrow_high). MORE_SEEDS=, NARROW= or NARROW_HIGH= empty: without those sweeps.
arms() {  # PARAM [OVERRIDE...]
  local p="$1"
  shift
  if [ -z "${STAGE:-}" ]; then
    grid "$p" "$p" "$WIDTHS" "$LRS" "${SEEDS:-}" "$@"
    grid "$p" "${p}_high" "$WIDTHS" "$LRS_HIGH" "${SEEDS:-}" "$@"
  fi
  if [ -n "$NARROW" ] && at more; then
    grid "$p" "${p}_narrow" "$NARROW" "$LRS,$LRS_HIGH" "$ALL_SEEDS" "$@"
  fi
  if [ -n "$MORE_SEEDS" ] && at more; then
    grid "$p" "${p}_seeds" "$WIDTHS" "$LRS,$LRS_HIGH" "$MORE_SEEDS" "$@"
  fi
  if [ -n "$NARROW" ] && [ -n "$NARROW_HIGH" ] && at narrow_high; then
    grid "$p" "${p}_narrow_high" "$NARROW" "$NARROW_HIGH" "$ALL_SEEDS" "$@"
  fi
}
sp() { arms sp "$@"; }
mup() { arms mup "$@"; }
if [ -z "${SKIP_TRAIN:-}" ]; then streams sp mup "$@"; fi
# μP's multipliers: one sweep each, JOBS runs at a time (μP alone trains)
if [ -n "$TUNE_OUT" ] && at tune; then
  grid mup mup_tune "$BASE_WIDTH" "$TUNE_LRS" "$TUNE_SEED" model.mup_output_mult="$TUNE_OUT" \
    model.mup_attn_mult="$TUNE_ATTN" "${AT_ONCE[@]}" "$@"
  if [ -n "$TUNE_MORE_SEEDS" ]; then
    grid mup mup_tune_seeds "$BASE_WIDTH" "$TUNE_LRS" "$TUNE_MORE_SEEDS" \
      model.mup_output_mult="$TUNE_OUT" model.mup_attn_mult="$TUNE_ATTN" "${AT_ONCE[@]}" "$@"
  fi
fi
if [ -n "$TUNE_OUT" ] && at tuned; then
  if [ -z "${TUNED_OUT:-}" ] || [ -z "${TUNED_ATTN:-}" ]; then  # the tuning's best cell
    TUNING=("$RUNS/mup_tune")
    if [ -n "$TUNE_MORE_SEEDS" ]; then TUNING+=("$RUNS/mup_tune_seeds"); fi
    CHOICE="$("$PY" "$HERE/transfer.py" --choose "${TUNING[@]}")"  # its failure stops the script
    read -r TUNED_OUT TUNED_ATTN <<< "$CHOICE"
  fi
  grid mup mup_tuned "${NARROW:+$NARROW,}$WIDTHS" "$TUNED_LRS" "$ALL_SEEDS" \
    model.mup_output_mult="$TUNED_OUT" \
    model.mup_attn_mult="$TUNED_ATTN" "${AT_ONCE[@]}" "$@"
  if [ -n "$TUNED_HIGH" ]; then
    grid mup mup_tuned_high "${NARROW:+$NARROW,}$WIDTHS" "$TUNED_HIGH" "$ALL_SEEDS" \
      model.mup_output_mult="$TUNED_OUT" model.mup_attn_mult="$TUNED_ATTN" "${AT_ONCE[@]}" "$@"
  fi
fi
[ -n "${STAGE:-}" ] && exit 0
analysis_follows

mapfile -t SP_SWEEPS < <(sweeps sp)
mapfile -t MUP_SWEEPS < <(sweeps mup)
TUNED=()  # μP's multipliers tuned at the base width, then transferred: tuned.md, tuned.png
if [ -n "$TUNE_OUT" ]; then
  TUNED=(--tune "$(sweep_dir mup_tune "$BASE/mup_tune")")
  if [ -n "$TUNE_MORE_SEEDS" ]; then
    TUNED+=("$(sweep_dir mup_tune_seeds "$BASE/mup_tune_seeds")")
  fi
  TUNED+=(--tuned "$(sweep_dir mup_tuned "$BASE/mup_tuned")")
  if [ -n "$TUNED_HIGH" ]; then TUNED+=("$(sweep_dir mup_tuned_high "$BASE/mup_tuned_high")"); fi
fi
"$PY" "$HERE/transfer.py" --sp "${SP_SWEEPS[@]}" --mup "${MUP_SWEEPS[@]}" "${TUNED[@]}" \
  --out "$OUT"
# μP's coordinate check from the sweep's base width, doubling up to 1024 (32 … 1024 by default;
# at least two widths) on the same text (a few minutes on the CPU; with --train or --measure):
# mean |activation| per layer type after each of 4 Adam steps, SP and μP
if measuring; then
  TEXT="$("$PY" -c 'from attnlab.data.paths import data_root; print(data_root())')/tinyshakespeare/input.txt"
  COORD_WIDTHS=("$BASE_WIDTH")
  while [ "${COORD_WIDTHS[-1]}" -lt 1024 ] || [ "${#COORD_WIDTHS[@]}" -lt 2 ]; do
    COORD_WIDTHS+=("$((COORD_WIDTHS[-1] * 2))")
  done
  "$PY" -m attnlab.coord_check --text "$TEXT" \
    --widths "${COORD_WIDTHS[@]}" --steps 4 --seeds 2 --lr 0.01 --out "$OUT/coord_check" \
    model.n_layers=2 model.pos=rope model.ffn=gelu model.init=gpt2 model.scale_embeddings=false \
    model.mup_base_width="$BASE_WIDTH"
fi
