# Sourced by each study's run.sh, not run on its own: strict mode, the repository root as the
# working directory, and what every study repeats.
#   HERE   the study's folder
#   OUT    where its tables and plots are written: HERE unless set (attnlab-reproduce --check
#          sets a temporary folder and compares)
#   RUNS   its committed raw runs, HERE/runs/<sweep>/<job>/{summary.json,metrics.csv}
#   PY     .venv/bin/python when `make setup` made it, else python
#   STAMP  a timestamp for new sweep directories
#   sweep_dir NAME DEFAULT   the sweep a table reads: RUNS/NAME when SKIP_TRAIN is set and
#                            SWEEP is not (the analysis of the committed runs), else DEFAULT
#   train_sweep NAME SWEEP OVERRIDE...   the multirun into SWEEP, then its raw files saved to
#                            RUNS/NAME (nothing when SKIP_TRAIN is set)
#   train_references [--script=FILE] [--init=attnlab|qkv] NAME FOLDER RUN... -- OVERRIDE...
#                            a gate from outside attnlab's model code (experiments/FILE:
#                            reference_translation.py unless given, or
#                            reference_classification.py), once per RUN (its own overrides, one
#                            word each, space-separated) with the common OVERRIDEs, JOBS at a
#                            time, into FOLDER/<k>; then the raw files saved to RUNS/NAME
#                            (nothing when SKIP_TRAIN or PLAN is set: PLAN lists attnlab-train
#                            sweeps)
#   compare_reference [--metrics="METRIC…"] FILE REFERENCE EXPERIMENT "KEY…" "RUNS…" SETTING...
#                            the gate's table: the reference runs in REFERENCE by experiment_name
#                            and the KEYs, then at each SETTING ("key=value …" in the KEYs'
#                            order) the study's EXPERIMENT (from RUNS) against the reference on
#                            the same seeds, Welch with Holm over the settings, on each METRIC
#                            (test/bleu and val/loss unless given)
#   compare_reference_init FILE REFERENCE INIT EXPERIMENT "KEY…" "RUNS…" SETTING...   appends
#                            the diagnostic: the reference initialised as attnlab initialises
#                            (runs in INIT, --init=attnlab) against the reference and against
#                            EXPERIMENT at each SETTING
#   measuring                true when the hardware measurements run: when training, or when
#                            MEASURE is set
#   measure SCRIPT FILE      runs HERE/SCRIPT into OUT/FILE, after the machine line
#   streams FIRST SECOND [OVERRIDE...]   two functions' sweeps: side by side, one thread each,
#                            or one after the other when JOBS=1
#   AT_ONCE                  the launcher overrides of a sweep that trains JOBS runs at a time
#   CORPUS_ARGS              the overrides that put a language-model sweep on CORPUS (none
#                            when CORPUS is unset)
#   no_corpus DATA           refuses CORPUS in a study that trains on DATA (not a language model)
#   refuse_tuning_seeds TUNING NAMES REPORTING NAMES   refuses a tuning seed that is also a
#                            reporting seed (winner's curse), naming the variables of each
#   analysis_follows         where training ends: a PLAN stops the script here
# and what every study reads from the environment:
#   JOBS     runs trained at once: 2 by default, side by side with one CPU thread each (as the
#            committed runs were made); 1 trains one run at a time with torch's own threads,
#            as on one GPU (give trainer=gpu as an argument)
#   CORPUS   a folder of token shards from attnlab-prepare: the language-model sweeps train on
#            it (data=tokens data.path=CORPUS) instead of Tiny Shakespeare
#   PLAN     a file: each sweep's attnlab.train command is written to it instead of run, and
#            the script stops where its analysis would begin (nothing is trained or written)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
cd "$HERE/../.."
PY="${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}"
STAMP="$(date +%Y-%m-%d_%H-%M-%S)"
OUT="${OUT:-$HERE}"
RUNS="$HERE/runs"
JOBS="${JOBS:-2}"
case "$JOBS" in
  '' | *[!0-9]* | 0)
    echo "error: JOBS=$JOBS is not a number of runs to train at once: give 1 (one GPU) or 2" >&2
    exit 2 ;;
esac
AT_ONCE=()
if [ "$JOBS" -gt 1 ]; then AT_ONCE=(hydra/launcher=joblib "hydra.launcher.n_jobs=$JOBS"); fi
CORPUS_ARGS=()
if [ -n "${CORPUS:-}" ]; then CORPUS_ARGS=(data=tokens "data.path=$CORPUS"); fi
[ -n "${PLAN:-}" ] || mkdir -p "$OUT"

sweep_dir() {
  if [ -n "${SKIP_TRAIN:-}" ] && [ -z "${SWEEP:-}" ]; then echo "$RUNS/$1"; else echo "$2"; fi
}

train_sweep() {
  local name="$1" sweep="$2"
  shift 2
  local command=("$PY" -m attnlab.train -m trainer.enable_progress_bar=false
                 hydra.sweep.dir="$sweep" "$@")
  if [ -n "${PLAN:-}" ]; then printf '%q ' "${command[@]}" >> "$PLAN"; echo >> "$PLAN"; return 0; fi
  if [ -n "${SKIP_TRAIN:-}" ]; then return 0; fi
  local threads=()  # runs side by side get one thread each
  if [ "$JOBS" -gt 1 ]; then threads=(env OMP_NUM_THREADS=1); fi
  # exit code 1 when a job did not complete (diverged runs included): the table counts them
  "${threads[@]}" "${command[@]}" \
    || echo "some runs did not complete (see 'failed' in the table); comparing anyway"
  "$PY" -m attnlab.studies --save-runs "$sweep" "$RUNS/$name"
}

train_references() {
  local script=reference_translation.py init=() runs=() run k=0 threads=()
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --script=*) script="${1#--script=}"; shift ;;
      --init=*) init=("$1"); shift ;;
      *) break ;;
    esac
  done
  local name="$1" folder="$2"
  shift 2
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do runs+=("$1"); shift; done
  [ "$#" -eq 0 ] || shift  # the --
  if [ -n "${PLAN:-}" ] || [ -n "${SKIP_TRAIN:-}" ]; then return 0; fi
  if [ "$JOBS" -gt 1 ]; then threads=(env OMP_NUM_THREADS=1); fi  # as train_sweep's runs
  local failed=0 pid pids=()
  for run in "${runs[@]}"; do
    # shellcheck disable=SC2086  # a run's own overrides are one word each
    "${threads[@]}" "$PY" "$HERE/../$script" "${init[@]}" "$folder/$k" "$@" $run &
    pids+=("$!")
    k=$((k + 1))
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done  # bash keeps each one's status
  # a diverged run is in the table as failed; a refused one left no summary (its error shows)
  [ "$failed" = 0 ] || echo "some reference runs did not complete; comparing anyway"
  "$PY" -m attnlab.studies --save-runs "$folder" "$RUNS/$name"
}

vs_pairs() {  # A B SETTING...: --vs "A SETTING" "B SETTING" for each setting, one per line
  local a="$1" b="$2" setting
  shift 2
  for setting in "$@"; do printf '%s\n' --vs "$a $setting" "$b $setting"; done
}

compare_reference() {
  local metrics="test/bleu val/loss"
  case "$1" in --metrics=*) metrics="${1#--metrics=}"; shift ;; esac
  local file="$1" reference="$2" experiment="$3" by="$4" study="$5" vs=() metric
  shift 5
  mapfile -t vs < <(vs_pairs "experiment_name=$experiment" "reference_$experiment" "$@")
  # one run per seed and setting: a warning about fewer than 3 runs is dropped, errors still show
  # shellcheck disable=SC2086  # $by, $study and $metrics are lists
  "$PY" -m attnlab.compare "$reference" --by experiment_name $by \
      --metric $metrics params > "$file" 2> >(grep -v '^warning: ' >&2)
  for metric in $metrics; do
    echo
    # shellcheck disable=SC2086
    "$PY" -m attnlab.compare "$reference" $study --by experiment_name $by --metric "$metric" \
        "${vs[@]}" | grep '^Welch\|^In each line'
  done >> "$file"
}

compare_reference_init() {
  local file="$1" reference="$2" init="$3" experiment="$4" by="$5" study="$6" metric
  shift 6
  local ours=() torch=()
  mapfile -t torch < <(vs_pairs "reference_${experiment}_attnlab_init" \
      "experiment_name=reference_$experiment" "$@")
  mapfile -t ours < <(vs_pairs "experiment_name=$experiment" \
      "reference_${experiment}_attnlab_init" "$@")
  {
    echo
    # shellcheck disable=SC2086  # $by is a list
    "$PY" -m attnlab.compare "$init" --by experiment_name $by --metric test/bleu val/loss params \
        2> >(grep -v '^warning: ' >&2) | grep '^|'
    for metric in test/bleu val/loss; do
      echo  # does attnlab's initialisation move the reference (A), and does it close the gap?
      # shellcheck disable=SC2086
      "$PY" -m attnlab.compare "$reference" "$init" $study --by experiment_name $by \
          --metric "$metric" "${torch[@]}" | grep '^Welch\|^In each line'
      echo
      # shellcheck disable=SC2086
      "$PY" -m attnlab.compare "$reference" "$init" $study --by experiment_name $by \
          --metric "$metric" "${ours[@]}" | grep '^Welch\|^In each line'
    done
  } >> "$file"
}

streams() {
  local first="$1" second="$2"
  shift 2
  if [ "$JOBS" -gt 1 ] && [ -z "${PLAN:-}" ]; then
    "$first" "$@" > /dev/null & "$second" "$@" > /dev/null & wait
  else
    "$first" "$@"
    "$second" "$@"
  fi
}

no_corpus() {
  if [ -n "${CORPUS:-}" ]; then
    echo "error: CORPUS is for the language-model studies; this one trains on $1: unset it" >&2
    exit 2
  fi
}

refuse_tuning_seeds() {  # the seeds that choose must not report
  local tuning="$1" tuning_names="$2" reporting="$3" reporting_names="$4" seed
  for seed in ${tuning//,/ }; do
    case ",$reporting," in *",$seed,"*)
      echo "error: tuning seed $seed ($tuning_names) is also a reporting seed ($reporting_names):" \
        "choose tuning seeds outside $reporting" >&2
      exit 2 ;;
    esac
  done
}

analysis_follows() { if [ -n "${PLAN:-}" ]; then exit 0; fi; }

measuring() { [ -z "${PLAN:-}" ] && { [ -z "${SKIP_TRAIN:-}" ] || [ -n "${MEASURE:-}" ]; }; }

measure() { { "$PY" -m attnlab.studies --machine; echo; "$PY" "$HERE/$1"; } > "$OUT/$2"; }
