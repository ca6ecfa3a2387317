#!/usr/bin/env bash
# train_matches_one_process.sh LINATTN MPIEXEC RANKS ATTENTION: `linattn train` alone and
# `MPIEXEC -n RANKS linattn train --seq-parallel` on the same flags must print the same losses (the
# --csv loss column, relative 1e-4) and held-out results, and rank 0 alone writes the files.
set -euo pipefail
linattn=$1 mpiexec=$2 ranks=$3 attention=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
flags=(--task copy --attention "$attention" --steps 6 --batch 2 --seq-len 29 --d-model 16 --layers 2 --heads 2
       --mlp-hidden 24 --chunk-size 4 --log-every 1 --threads 1)
"$linattn" train "${flags[@]}" --out "$dir/alone.model" --csv "$dir/alone.csv" > "$dir/alone.log"
"$mpiexec" -n "$ranks" --oversubscribe "$linattn" train --seq-parallel "${flags[@]}" --out "$dir/split.model" \
  --csv "$dir/split.csv" > "$dir/split.log"
cat "$dir/split.log"
test "$(grep -c '^train:' "$dir/split.log")" = 1 || { echo "expected one rank to print" >&2; exit 1; }
grep -q "^sequence parallel: $ranks ranks" "$dir/split.log"
test -s "$dir/split.model" && test -s "$dir/split.model.ckpt"
# Columns 2 (loss) and 6..8 (held-out loss, bits per token, accuracy) of every row.
paste -d, "$dir/alone.csv" "$dir/split.csv" | awk -F, 'NR > 1 {
  for (i = 2; i <= 8; i += (i == 2 ? 4 : 1)) {
    a = $i; b = $(i + 8)
    if ((a == "") != (b == "")) { print "row " NR ": column " i " present in one run only"; bad = 1; continue }
    if (a == "") continue
    d = a - b; if (d < 0) d = -d
    if (d > 1e-4 * (a < 0 ? -a : a) + 1e-6) { print "row " NR ": column " i ": " a " alone, " b " split"; bad = 1 }
  }
  rows++
} END { if (rows < 6) { print "expected 6 rows, got " rows; bad = 1 } exit bad }'
echo "train_matches_one_process: $attention over $ranks ranks: the losses of one process"
