#!/usr/bin/env bash
# "Transformers are RNNs" (Katharopoulos et al., ICML 2020) at the scale of a 2-core CPU, with the
# linattn command: the copy task (loss curves, copy accuracy), a character-level text model
# (held-out bits/char) and generation speed (softmax + KV cache against linear + RNN state, as the
# context grows to 64K). Results, CSVs and gnuplot plots go to $OUT (default results/transformer);
# The plots, CSVs and summary are also copied to docs/transformer/ (small files, for the record;
# docs/transformer.md shows a run). QUICK=1 runs a few steps of everything (a smoke test), into
# out/transformer-quick, and copies nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/transformer}
build=${BUILD:-build}
jobs=${JOBS:-$(nproc)}
quick=${QUICK:-0}

# Copy task: the same model for the three kinds of attention.
copy_steps=${COPY_STEPS:-6000}
model=(--d-model 64 --layers 2 --heads 4 --mlp-hidden 256 --favor-features 64)
copy_train=(--task copy --batch 16 --seq-len 128 --lr 3e-3 --min-lr 3e-4 --warmup 100 --eval-every 250
            --eval-batches 16)
# Text: character level on data/devils_dictionary.txt, held-out bits/char on its last 10%.
text_steps=${TEXT_STEPS:-1500}
text_train=(--task text --data data/devils_dictionary.txt --batch 16 --seq-len 128 --lr 3e-3 --min-lr 3e-4
            --warmup 100 --eval-every 250 --eval-batches 1000)
# Generation speed: single-token steps after these contexts.
contexts=${CONTEXTS:-1024,4096,16384,65536}
speed_tokens=256
if [[ $quick == 1 ]]; then
  copy_steps=20 text_steps=20 contexts=256,1024 speed_tokens=8 out=${OUT:-out/transformer-quick}
fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target linattn_cli >/dev/null
bin=$build/tools/linattn
mkdir -p "$out"
start=$SECONDS

# Runs "$@" in the background, at most $jobs at a time; each run gets one thread.
running=0
spawn() {
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
  "$@" &
  running=$((running + 1))
}
train() {  # name, then train flags
  local name=$1; shift
  "$bin" train "$@" --threads 1 --log-every 50 --csv "$out/$name.csv" --out "$out/$name.model" >"$out/$name.log"
  echo "$name: $(tail -n 3 "$out/$name.log" | head -n 1)"
}

if [[ ${PLOT_ONLY:-0} != 1 ]]; then  # PLOT_ONLY=1: tables and plots again from the CSVs in $out
echo "== training (copy: $copy_steps steps, text: $text_steps steps; $jobs at a time) =="
for kind in softmax linear favor; do
  spawn train "copy_$kind" "${copy_train[@]}" "${model[@]}" --attention $kind --steps "$copy_steps"
done
for kind in softmax linear favor; do
  spawn train "text_$kind" "${text_train[@]}" "${model[@]}" --attention $kind --steps "$text_steps"
done
wait

echo "== generation speed (contexts $contexts, $speed_tokens timed tokens each, 1 thread) =="
for kind in softmax linear favor; do
  "$bin" generate --model "$out/copy_$kind.model" --speed-contexts "$contexts" --speed-tokens $speed_tokens \
    --temperature 0 --threads 1 --speed-csv "$out/speed_$kind.csv" | tail -n +2
done

echo "== samples (greedy copy of a held-out-like sequence; text at temperature 0.8) =="
probe=$(head -c 4000 /dev/urandom | tr -dc 'a-j' | head -c 48)
for kind in softmax linear favor; do
  echo "copy $kind: $("$bin" generate --model "$out/copy_$kind.model" --prompt "$probe|" --tokens 48 --temperature 0 \
    --threads 1 2>/dev/null | cut -c50-)" | tee "$out/sample_copy_$kind.txt"
  "$bin" generate --model "$out/text_$kind.model" --prompt "LOVE, n." --tokens 300 --temperature 0.8 --seed 1 \
    --threads 1 >"$out/sample_text_$kind.txt" 2>/dev/null
done
echo "copy target:  $probe"
fi

# Tables: last held-out evaluation of each run, and the speed ratio at each context.
last_eval() { awk -F, 'NR > 1 && $6 != "" { row = $0 } END { print row }' "$1"; }
{
  echo "| attention | copy: held-out accuracy | copy: held-out loss | text: held-out bits/char | text: train loss |"
  echo "|---|---|---|---|---|"
  for kind in softmax linear favor; do
    IFS=, read -r _ _ _ _ _ copy_loss _ copy_acc <<<"$(last_eval "$out/copy_$kind.csv")"
    IFS=, read -r _ text_train_loss _ _ _ _ text_bits _ <<<"$(last_eval "$out/text_$kind.csv")"
    printf '| %s | %.2f%% | %.4f | %.3f | %.3f |\n' $kind "$(awk -v a="$copy_acc" 'BEGIN { print 100 * a }')" \
      "$copy_loss" "$text_bits" "$text_train_loss"
  done
  echo
  echo "| context | softmax + KV cache, CPU ms/token | linear + state, CPU ms/token | favor + state, CPU ms/token | softmax / linear |"
  echo "|---|---|---|---|---|"
  join -t, <(tail -n +2 "$out/speed_softmax.csv" | cut -d, -f2,7) \
    <(join -t, <(tail -n +2 "$out/speed_linear.csv" | cut -d, -f2,7) <(tail -n +2 "$out/speed_favor.csv" | cut -d, -f2,7)) |
    awk -F, '{ printf "| %d | %.4f | %.4f | %.4f | %.1f× |\n", $1, $2, $3, $4, $2 / $3 }'
} >"$out/summary.md"

# Plots (gnuplot-nox): copy loss and accuracy curves, text loss curves, time per token.
if command -v gnuplot >/dev/null; then
  (cd "$out" && gnuplot <<'GP'
set terminal pngcairo size 1200,420
set datafile separator ","
set key top right
set output "copy_curves.png.tmp"
set multiplot layout 1,2
set xlabel "step"; set ylabel "training loss (nats, copied half)"
plot for [k in "softmax linear favor"] "copy_".k.".csv" using 1:2 every ::1 with lines title k
set ylabel "held-out copy accuracy"; set yrange [0:1]; set key bottom right
plot for [k in "softmax linear favor"] "copy_".k.".csv" using 1:8 every ::1 with linespoints title k
unset multiplot
set output "text_curves.png.tmp"
set autoscale y; set key top right
set multiplot layout 1,2
set ylabel "training loss (nats/char)"
plot for [k in "softmax linear favor"] "text_".k.".csv" using 1:2 every ::1 with lines title k
set ylabel "held-out bits/char"; set key top right
plot for [k in "softmax linear favor"] "text_".k.".csv" using 1:7 every ::1 with linespoints title k
unset multiplot
set output "generation_speed.png.tmp"
set terminal pngcairo size 700,460
set logscale xy
set xlabel "context (tokens)"; set ylabel "CPU ms per generated token"
plot for [k in "softmax linear favor"] "speed_".k.".csv" using 2:7 every ::1 with linespoints title k
GP
  ) && for f in copy_curves text_curves generation_speed; do mv "$out/$f.png.tmp" "$out/$f.png"; done
fi

if [[ $quick != 1 ]]; then
  mkdir -p docs/transformer
  cp "$out"/*.png "$out"/*.csv "$out"/summary.md "$out"/sample_*.txt docs/transformer/ 2>/dev/null || true
fi
cat "$out/summary.md"
echo "results in $out/ ($((SECONDS - start)) s)"
