#!/usr/bin/env bash
# Multi-query associative recall (MQAR, Zoology) against the number of key–value pairs, for softmax,
# linear (elu+1), GLA, DeltaNet and Gated DeltaNet at equal width and steps (docs/transformer.md,
# "Associative recall"). One `linattn train --task mqar` per (attention, pairs), one thread each, $JOBS
# at a time; the held-out accuracy on the answers of each goes to $OUT/mqar.csv, the plot to
# $OUT/mqar.png, and both are copied to docs/figures/ (COPY=0: not copied). PLOT_ONLY=1 redraws the
# table and plot from $OUT's logs; QUICK=1 is a smoke test (a few steps, into out/mqar-quick, nothing copied).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/mqar}
build=${BUILD:-build}
jobs=${JOBS:-2}
kinds=${KINDS:-"softmax linear gla deltanet gated_deltanet"}
pairs_list=${PAIRS:-"32 16 8 4"}  # the longest runs first, so that the last ones to finish are short
steps=${STEPS:-400}
copy=${COPY:-1}
if [[ ${QUICK:-0} == 1 ]]; then steps=10 out=${OUT:-out/mqar-quick} copy=0; fi
# The model of docs/transformer.md (C = 64, 2 layers, 4 heads of 16, MLP 256); 128 symbols (64 keys,
# 64 values). Sequences of T = 4N tokens (N pairs, N queries with their answers) unless SEQ is set:
# the model is causal and only the answers count, so padding after the last answer (a longer T) would
# change nothing but the cost.
model=(--d-model 64 --layers 2 --heads 4 --mlp-hidden 256)
train=(--task mqar --mqar-vocab "${VOCAB:-128}" --batch "${BATCH:-16}" --lr 3e-3 --min-lr 3e-4 --warmup 50
       --eval-batches 16 --steps "$steps")
export OMP_WAIT_POLICY=passive  # one thread per run on a shared machine: no spinning

bin=$build/tools/linattn
mkdir -p "$out"
start=$SECONDS
if [[ ${PLOT_ONLY:-0} != 1 ]]; then
  [[ -x $bin ]] || { echo "mqar_sweep: $bin not found: build the linattn_cli target first (BUILD=dir)" >&2; exit 1; }
  running=0
  run() {  # attention, pairs
    local t0=$SECONDS
    "$bin" train "${train[@]}" "${model[@]}" --attention "$1" --mqar-pairs "$2" --seq-len "${SEQ:-$((4 * $2))}" \
      --threads 1 --log-every 100 --out "$out/$1_$2.model" \
      --csv "$out/$1_$2.csv" >"$out/$1_$2.log"
    echo "seconds: $((SECONDS - t0))" >>"$out/$1_$2.log"
    echo "$1, $2 pairs: $(grep '^mqar:' "$out/$1_$2.log") ($((SECONDS - t0)) s)"
  }
  echo "== mqar: $steps steps per run, $jobs at a time =="
  for pairs in $pairs_list; do
    for kind in $kinds; do
      if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
      run "$kind" "$pairs" &
      running=$((running + 1))
    done
  done
  wait
fi

# The table: one row per run, from the line `linattn train` prints at the end of an MQAR run.
{
  echo "attention,pairs,seq_len,accuracy,loss,steps,seconds"
  for kind in $kinds; do
    for pairs in $(tr ' ' '\n' <<<"$pairs_list" | sort -n); do
      log=$out/${kind}_$pairs.log
      [[ -f $log ]] || continue
      line=$(grep '^mqar:' "$log")
      accuracy=$(sed -E 's/.*answers ([0-9.]+).*/\1/' <<<"$line")
      loss=$(sed -E 's/.*loss ([0-9.]+).*/\1/' <<<"$line")
      run_steps=$(grep -m1 '^train:' "$log" | sed -E 's/.* ([0-9]+) steps.*/\1/')
      seq_len=$(grep -m1 '^train:' "$log" | sed -E 's/.* x ([0-9]+) tokens.*/\1/')
      echo "$kind,$pairs,$seq_len,$accuracy,$loss,$run_steps,$(sed -nE 's/^seconds: ([0-9]+)/\1/p' "$log")"
    done
  done
} >"$out/mqar.csv"
column -s, -t "$out/mqar.csv"

if command -v gnuplot >/dev/null; then
  (cd "$out" && gnuplot <<'GP'
set terminal pngcairo size 760,480 noenhanced
set output 'mqar.png'
set datafile separator ','
set title 'MQAR: held-out accuracy on the answers (C = 64, 2 layers, 128 symbols, equal steps)'
set xlabel 'key-value pairs'
set ylabel 'accuracy'
set logscale x 2
set xtics (4, 8, 16, 32, 64)
set yrange [0:0.7]
set key top right
set grid
kinds = 'softmax linear gla deltanet gated_deltanet'
set style data linespoints
plot for [k in kinds] 'mqar.csv' using 2:(strcol(1) eq k ? $4 : 1/0) lw 2 title k, \
  [4:32] 1/x with lines dt 2 lc rgb 'gray40' title 'a value of the context, guessed (1/N)'
GP
  )
fi
if [[ $copy == 1 ]]; then
  mkdir -p docs/figures
  cp "$out/mqar.csv" docs/figures/mqar.csv
  [[ -f $out/mqar.png ]] && cp "$out/mqar.png" docs/figures/mqar.png
fi
echo "mqar_sweep: $((SECONDS - start)) s; table $out/mqar.csv"
