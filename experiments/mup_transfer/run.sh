#!/usr/bin/env bash
# μP learning-rate transfer (Yang et al. 2022, "Tensor Programs V", Fig. 1): a 2-layer decoder
# on Tiny Shakespeare (characters) at widths 32, 64, 128, 256 and learning rates 2^-11 … 2^-4,
# under SP and under μP (base width 32), one seed: 64 runs of 400 steps, as two sweeps per
# parametrisation (2^-11 … 2^-6, then 2^-5 and 2^-4, where μP's optimum lies). The two
# parametrisations train side by side, one thread each (≈ 45 min on 2 cores); their raw runs
# are saved to runs/{sp,mup}{,_high}. Then transfer.md (final validation loss per width and
# learning rate, the best learning rate per width and its drift) and transfer.png.
#   attnlab-reproduce mup_transfer --train    # this script
#   attnlab-reproduce mup_transfer --check    # the analysis of the committed runs
#   GATE=1 experiments/mup_transfer/run.sh      # also the gate (nanoGPT at the study's shape)
# WIDTHS, LRS and LRS_HIGH (the two learning-rate sweeps), SEEDS and BASE_WIDTH (μP's) default
# to the committed study's; extra arguments go to every training run (trainer.max_steps=…);
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
SP="$(sweep_dir sp "$BASE/sp")" MUP="$(sweep_dir mup "$BASE/mup")"
SP_HIGH="$(sweep_dir sp_high "$BASE/sp_high")" MUP_HIGH="$(sweep_dir mup_high "$BASE/mup_high")"

grid() {  # PARAM NAME SWEEP LRS [OVERRIDE...]
  local base=()  # μP's own key: its base width (SP reads none)
  if [ "$1" = mup ]; then base=(model.mup_base_width="$BASE_WIDTH"); fi
  local seeds=()  # the committed runs: the config's seed, 0
  if [ -n "${SEEDS:-}" ]; then seeds=(seed="$SEEDS"); fi
  train_sweep "$2" "$3" experiment=study_mup_transfer model.param="$1" \
    model.d_model="$WIDTHS" optim.lr="$4" "${seeds[@]}" "${base[@]}" "${CORPUS_ARGS[@]}" "${@:5}"
}
both() {  # PARAM SWEEP HIGH_SWEEP [OVERRIDE...]
  grid "$1" "$1" "$2" "$LRS" "${@:4}"
  grid "$1" "$1_high" "$3" "$LRS_HIGH" "${@:4}"
}
sp() { both sp "$SP" "$SP_HIGH" "$@"; }
mup() { both mup "$MUP" "$MUP_HIGH" "$@"; }
if [ -z "${SKIP_TRAIN:-}" ]; then streams sp mup "$@"; fi
analysis_follows

"$PY" "$HERE/transfer.py" --sp "$SP" "$SP_HIGH" --mup "$MUP" "$MUP_HIGH" --out "$OUT"
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
