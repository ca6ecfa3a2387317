#!/usr/bin/env bash
# Issue 41's Long Range Arena comparison at the scale of a 2-core CPU: trains every (task, model) pair
# with `linattn train` within a budget of wall time per pair, scores its checkpoint with `linattn eval`
# on the task's test split, and writes a table in the LRA's layout (Tay et al., 2020, Table 1: accuracy
# per task and model, with training tokens/s and peak memory) as Markdown and CSV, with a gnuplot PNG.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: scripts/reproduce_applications.sh [options]

Trains each (task, model) pair for about --budget-minutes of wall time (one process at a time, at --nice
niceness, --threads threads), evaluates it on the test split and writes OUT/lra_table.md, OUT/lra_table.csv and
OUT/lra_table.png. A pair whose task or model this build of linattn does not have is reported as
"not built" with the command's reason.

How a budget becomes steps: a probe of 4 steps measures the pair's training tokens/s (steps 2 to 4); the run
gets the steps that fit 90% of what is left of the budget (at least 10), the cosine schedule over them. A
run still going at 1.5x the budget is stopped by SIGTERM (train checkpoints on it) and evaluated as it is.

Options:
  --budget-minutes M   wall time per pair, probe included (default 6: 24 pairs in about 2.5 hours)
  --quick              a smoke run of about 5 minutes in all: a tiny model, 8 s a pair (unless
                       --budget-minutes is given), ListOps of 64 tokens, images of 16x16, speech of 1,000
                       samples (Pathfinder stays 32x32); into out/applications-quick
  --image-size N       the Image task's side: 16, 32, 64 (default), 128 or 256 (make_image_data.py)
  --tasks LIST         comma-separated, of listops,pathfinder,image,speech (default: all four)
  --models LIST        comma-separated, of softmax,linear,performer,linformer,gla,gated_deltanet (default: all)
  --out DIR            results folder (default out/applications); data files are kept in DIR/data
  --threads N          threads per run (default 1)
  --nice N             the niceness the runs get (default 19: the grid yields to other work; 0 when it
                       has the machine, or a core of it, to itself)
  --test-examples N    evaluate on the test split's first N examples (default 0: all of it; --quick: 200)
  --bin PATH           the linattn command (default $LINATTN_BIN or build/tools/linattn)
  --table-only         write the table and the plot again from the pairs already in DIR/pairs
  -h, --help           this text

Sizes: ListOps at LRA's 2,000 tokens; Pathfinder 32x32 (1,024 pixels); Image: scikit-learn's digits
upscaled to 64x64 (4,096 pixels; LRA's CIFAR-10 is 1,024: --image-size 32); Speech: keywords at 4 kHz,
4,000 samples (1 s; make_speech_data.py).
The model is the same for every pair: d_model 64, 2 layers, 4 heads, MLP 128, batch 8, lr 2e-3.

Examples:
  scripts/reproduce_applications.sh --quick
  scripts/reproduce_applications.sh --budget-minutes 10 --out out/lra-10min
  scripts/reproduce_applications.sh --tasks listops --models softmax,linear --budget-minutes 2
  scripts/reproduce_applications.sh --table-only --out out/lra-10min
EOF
}

die() { echo "reproduce_applications: $*" >&2; exit 2; }

budget_minutes= quick=0 out= threads=1 niceness=19 table_only=0 test_examples= image_size=
tasks=listops,pathfinder,image,speech
models=softmax,linear,performer,linformer,gla,gated_deltanet
bin=${LINATTN_BIN:-build/tools/linattn}
while (($#)); do
  case $1 in
    --budget-minutes) budget_minutes=${2:?--budget-minutes needs a value}; shift 2 ;;
    --quick) quick=1; shift ;;
    --tasks) tasks=${2:?--tasks needs a value}; shift 2 ;;
    --models) models=${2:?--models needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --threads) threads=${2:?--threads needs a value}; shift 2 ;;
    --nice) niceness=${2:?--nice needs a value}; shift 2 ;;
    --test-examples) test_examples=${2:?--test-examples needs a value}; shift 2 ;;
    --image-size) image_size=${2:?--image-size needs a value}; shift 2 ;;
    --bin) bin=${2:?--bin needs a value}; shift 2 ;;
    --table-only) table_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
if [[ -n $budget_minutes ]] && ! awk -v m="$budget_minutes" 'BEGIN { exit !(m + 0 == m && m > 0) }'; then
  die "--budget-minutes '$budget_minutes': expected a number of minutes above 0, e.g. 6 or 0.5"
fi
[[ $threads =~ ^[1-9][0-9]*$ ]] || die "--threads '$threads': expected a whole number of at least 1"
[[ $niceness =~ ^-?[0-9]+$ ]] && ((niceness >= -20 && niceness <= 19)) ||
  die "--nice '$niceness': expected a whole number from -20 to 19 (nice(1)'s range)"
[[ -z $image_size || $image_size =~ ^(16|32|64|128|256)$ ]] ||
  die "--image-size '$image_size': expected 16, 32, 64, 128 or 256 (make_image_data.py's sizes)"
[[ -z $test_examples || $test_examples =~ ^[0-9]+$ ]] ||
  die "--test-examples '$test_examples': expected a whole number (0: the whole test split)"
for t in ${tasks//,/ }; do
  [[ $t =~ ^(listops|pathfinder|image|speech)$ ]] || die "--tasks: unknown task '$t' (listops, pathfinder, image, speech)"
done
for m in ${models//,/ }; do
  [[ $m =~ ^(softmax|linear|performer|linformer|gla|gated_deltanet)$ ]] ||
    die "--models: unknown model '$m' (softmax, linear, performer, linformer, gla, gated_deltanet)"
done
if [[ $quick == 1 ]]; then
  budget_minutes=${budget_minutes:-0.14} out=${out:-out/applications-quick} test_examples=${test_examples:-200}
else
  budget_minutes=${budget_minutes:-6} out=${out:-out/applications}
fi
budget_s=$(awk -v m="$budget_minutes" 'BEGIN { printf "%d", m * 60 + 0.5 }')
# The venv's interpreter where there is one: make_image_data.py needs scikit-learn (scripts/test.sh's pip line).
python=${PYTHON:-$( [[ -x build/venv/bin/python ]] && echo build/venv/bin/python || command -v python3)}
table="$python scripts/applications/lra_table.py"
mkdir -p "$out/pairs" "$out/data" "$out/runs"

# Per task: the data it needs and its train flags. Quick mode shrinks lengths and data.
model_flags=(--d-model 64 --layers 2 --heads 4 --mlp-hidden 128 --batch 8 --lr 2e-3 --min-lr 2e-4)
image_side=${image_size:-64}
listops_len=2000 pathfinder_size=32 speech=(--rate 4000 --length 4000 --train 300 --eval 50)
if [[ $quick == 1 ]]; then
  model_flags=(--d-model 32 --layers 1 --heads 2 --mlp-hidden 64 --batch 8 --lr 3e-3 --min-lr 3e-4)
  image_side=${image_size:-16} listops_len=64 speech=(--rate 4000 --length 1000 --train 4 --eval 2)
fi

# Writes the task's data file if it is not there yet (its name records its sizes); prints its path.
data_file() {
  local task=$1 file maker
  case $task in
    image) file="$out/data/image_$image_side.ds" maker=(scripts/applications/make_image_data.py --size "$image_side") ;;
    speech) file="$out/data/speech_$(IFS=_; echo "${speech[*]//--/}").ds"
            maker=(scripts/applications/make_speech_data.py "${speech[@]}") ;;
  esac
  [[ -f ${maker[0]} ]] || { echo "not built: ${maker[0]} does not exist" >&2; return 1; }
  if [[ ! -f $file ]]; then
    echo "== $task data: ${maker[*]} --out $file ==" >&2
    nice -n "$niceness" "$python" "${maker[@]}" --out "$file" >&2 || { echo "not built: ${maker[0]} failed" >&2; return 1; }
  fi
  echo "$file"
}

# task_flags TASK DATA: the flags that pick the task (and its data) for train and eval.
task_flags() {
  case $1 in
    listops) echo "--task listops --seq-len $listops_len" ;;
    pathfinder) echo "--task pathfinder --image-size $pathfinder_size" ;;
    image | speech) echo "--task $1 --data $2" ;;
  esac
}

# Tokens a step trains: batch x the task's sequence length (read from the probe's first line).
step_tokens() { sed -n 's/.*batch \([0-9]*\) x \([0-9]*\) tokens.*/\1 \2/p' "$1" | awk 'NR == 1 { print $1 * $2 }'; }
# The probe's training speed without its first step (which also warms up): train's tokens/s column is an
# average since the start, so the time at step k is k x step tokens / column; the rate is from step 1 to the last.
probe_tokens_per_s() {
  awk -F, -v p="$2" 'NR > 1 && $5 > 0 { t = $1 * p / $5; if (!n++) { s1 = $1; t1 = t } ; s = $1; tl = t }
    END { print (s > s1 && tl > t1) ? (s - s1) * p / (tl - t1) : s * p / tl }' "$1"
}

# report TASK MODEL STATUS [lra_table.py row flags]: DIR/pairs/TASK_MODEL.csv, and a line on stdout.
report() {
  local row="$out/pairs/${1}_$2.csv"
  $table row "$@" >"$row" || $table row "$1" "$2" "failed: lra_table.py could not read the run's files" >"$row"
  echo "$1/$2: $(tail -n 1 "$row")"
}

# One pair: probe, train, eval, report.
run_pair() {
  local task=$1 model=$2 data= run="$out/runs/${1}_$2" start
  local -a flags
  if [[ $task == image || $task == speech ]]; then
    data=$(data_file "$task" 2>"$run.data.log") || { report "$task" "$model" "$(tail -n 1 "$run.data.log")"; return; }
  fi
  start=$SECONDS  # the budget starts after the data file is written
  read -ra flags <<<"$(task_flags "$task" "$data")"
  flags+=("${model_flags[@]}" --attention "$model" --threads "$threads")
  # The probe: does this build have the pair, and how fast does it train?
  local code=0 why
  nice -n "$niceness" "$bin" train "${flags[@]}" --steps 4 --warmup 1 --log-every 1 --eval-batches 1 --checkpoint-every 0 \
    --csv "$run.probe.csv" --out "$run.probe.model" >"$run.probe.log" 2>&1 || code=$?
  if ((code != 0)); then
    why=$(grep -m1 'error' "$run.probe.log" || tail -n 1 "$run.probe.log")
    # Exit 2 naming --task or --attention: this build does not have the pair (a usage error, not a crash).
    if ((code == 2)) && [[ $why == *"--task"* || $why == *"--attention"* ]]; then
      report "$task" "$model" "not built: $why"
    else
      report "$task" "$model" "failed: probe exit $code: $why"
    fi
    return
  fi
  rm -f "$run.probe.model" "$run.probe.model.ckpt"
  local tps per_step left steps
  per_step=$(step_tokens "$run.probe.log")
  tps=$(probe_tokens_per_s "$run.probe.csv" "$per_step")
  left=$((budget_s - (SECONDS - start)))
  steps=$(awk -v l="$left" -v t="$tps" -v p="$per_step" 'BEGIN { s = int(0.9 * l * t / p); print (s < 10 ? 10 : s) }')
  local warmup=$(((steps + 9) / 10))
  code=0
  nice -n "$niceness" /usr/bin/time -v -o "$run.time" timeout -s TERM $((budget_s * 3 / 2 + 5)) "$bin" train "${flags[@]}" \
    --steps "$steps" --warmup "$warmup" --eval-batches 1 --log-every $(((steps + 9) / 10)) --checkpoint-every 0 \
    --csv "$run.csv" --out "$run.model" >"$run.log" 2>&1 || code=$?
  local train_s=$((SECONDS - start)) note=
  [[ $code == 124 ]] && note="stopped at 1.5x the budget"
  if [[ $code != 0 && $code != 124 ]] || [[ ! -f $run.model.ckpt ]]; then
    report "$task" "$model" "failed: train exit $code: $(grep -m1 error "$run.log" || tail -n 1 "$run.log")"; return
  fi
  local -a eval_flags=(--examples "${test_examples:-0}")
  [[ -n $data ]] && eval_flags+=(--data "$data")
  if ! nice -n "$niceness" "$bin" eval "$run.model.ckpt" "${eval_flags[@]}" --threads "$threads" --json >"$run.eval.json" \
      2>"$run.eval.log"; then
    report "$task" "$model" "failed: eval: $(tail -n 1 "$run.eval.log")"; return
  fi
  report "$task" "$model" ok --eval-json "$run.eval.json" --train-csv "$run.csv" --train-log "$run.log" --time-v "$run.time" --steps "$steps" \
    --step-tokens "$per_step" \
    --train-seconds "$train_s" --budget-seconds "$budget_s" --note "$note"
}

if [[ $table_only != 1 ]]; then
  [[ -x $bin ]] || die "the linattn command '$bin' is not there: build it (cmake --build build --target linattn_cli) or give --bin"
  [[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (it measures peak memory): scripts/setup.sh installs it"
  echo "reproduce_applications: tasks $tasks; models $models; $budget_minutes min ($budget_s s) a pair; $threads thread(s); into $out"
  for task in ${tasks//,/ }; do
    for model in ${models//,/ }; do run_pair "$task" "$model"; done
  done
fi
$table table --pairs "$out/pairs" --out "$out/lra_table" --budget-minutes "$budget_minutes"
echo "reproduce_applications: $out/lra_table.md, $out/lra_table.csv, $out/lra_table.png"
