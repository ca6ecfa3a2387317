#!/usr/bin/env python3
"""The vision-transformer scaling figure of issue 41: a patch-free (pixel) encoder, softmax against linear.

For each image size (64x64, 128x128, 256x256: 4,096, 16,384 and 65,536 tokens) and each attention, one
training step (`linattn train --task image --data FILE --steps 1 --batch 1`) and one forward (`linattn eval`
of that checkpoint, one image) are timed, with the peak memory of each process (GNU time's maximum
resident set). The images are random pixels written with dataset_file.py: the cost of a step does not
depend on the pixels, only on their number. A measurement that runs past --time-limit is stopped and
reported as over the time budget; a refusal for memory (exit 3) as over the memory budget. The size
where softmax first fails either is printed: the N at which softmax no longer fits this machine.

Writes OUT/vit_scaling.csv, OUT/vit_scaling.md and OUT/vit_scaling.png (gnuplot).

  scripts/applications/vit_scaling.py
  scripts/applications/vit_scaling.py --sizes 32,64 --time-limit 60 --out /tmp/vit
  scripts/applications/vit_scaling.py --threads 2 --methods softmax,linear,gla
"""
import argparse
import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from dataset_file import write_dataset  # noqa: E402
from lra_table import time_v_field  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
COLUMNS = ("size", "tokens", "method", "phase", "status", "seconds", "peak_rss_mib", "note")
MODEL = ("--d-model", "64", "--layers", "2", "--heads", "4", "--mlp-hidden", "128")


def random_images(path, size, seed=1):
    """A dataset file of random 8-bit pixels (size x size tokens), two training images and one each for
    validation and test, ten classes: enough for one step and one forward."""
    rng = np.random.default_rng([seed, size])
    split = lambda n: (rng.integers(0, 256, (n, size * size), dtype=np.uint8), rng.integers(0, 10, n))
    write_dataset(path, "image", {"train": split(2), "validation": split(1), "test": split(1)}, 256,
                  [str(c) for c in range(10)])


def timed(command, limit, time_v):
    """Runs command under GNU time -v and `timeout`; (exit code, stdout, stderr, wall seconds, peak MiB).
    --foreground: timeout kills the command alone and reaps it, so GNU time still sees the command's peak
    memory (without it timeout's KILL reaches its own process group, timeout too, before the reaping)."""
    full = ["nice", "-n", "19", "/usr/bin/time", "-v", "-o", str(time_v), "timeout", "--foreground", "-s", "KILL",
            str(limit), *command]
    start = time.monotonic()
    proc = subprocess.run(full, capture_output=True, text=True)
    wall = time.monotonic() - start
    return proc.returncode, proc.stdout, proc.stderr, wall, time_v_field(time_v, "Maximum resident set size (kbytes)") / 1024


def status_of(code, stderr, limit):
    """ok, or why the measurement does not fit this machine."""
    if code == 0:
        return "ok", ""
    if code in (124, 137):
        return "over time", f"stopped at the {limit} s limit"
    if code == 3:
        return "over memory", stderr.strip().splitlines()[-1] if stderr.strip() else "exit 3"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    raise SystemExit(f"vit_scaling: {last or f'exit {code}'}")


def step_seconds(train_csv, tokens):
    """The training step's time, from train's tokens/s over its one step (model setup and loading excluded)."""
    rows = [r for r in csv.DictReader(open(train_csv)) if r["tokens_per_s"]]
    return tokens / float(rows[-1]["tokens_per_s"])


def measure(args, size, method, data, work):
    """The two rows (train step, forward) of one size and method."""
    tokens, run = size * size, work / f"{method}_{size}"
    common = ["--threads", str(args.threads)]
    train = [args.bin, "train", "--task", "image", "--data", str(data), "--attention", method, *MODEL, "--batch", "1",
             "--steps", "1", "--warmup", "1", "--eval-batches", "1", "--log-every", "1", "--checkpoint-every", "0",
             "--csv", f"{run}.csv", "--out", f"{run}.model", *common]
    code, _, err, wall, rss = timed(train, args.time_limit, f"{run}.train.time")
    status, note = status_of(code, err, args.time_limit)
    rows = [dict(size=size, tokens=tokens, method=method, phase="train step", status=status, peak_rss_mib=f"{rss:.0f}",
                 seconds=f"{step_seconds(f'{run}.csv', tokens):.3f}" if status == "ok" else f">{wall:.0f}", note=note)]
    if status != "ok":
        rows.append(dict(rows[0], phase="forward", status="not run", seconds="", peak_rss_mib="",
                         note="no checkpoint: the training step did not finish"))
        return rows
    forward = [args.bin, "eval", f"{run}.model.ckpt", "--data", str(data), "--examples", "1", "--batch", "1", "--json",
               *common]
    code, out, err, wall, rss = timed(forward, args.time_limit, f"{run}.eval.time")
    status, note = status_of(code, err, args.time_limit)
    seconds = f"{json.loads(out)['seconds']:.3f}" if status == "ok" else f">{wall:.0f}"
    rows.append(dict(size=size, tokens=tokens, method=method, phase="forward", status=status, seconds=seconds,
                     peak_rss_mib=f"{rss:.0f}", note=note))
    for suffix in (".model", ".model.ckpt"):
        pathlib.Path(f"{run}{suffix}").unlink(missing_ok=True)
    return rows


def markdown(rows, args):
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out = [f"One training step and one forward of the pixel encoder (d_model 64, 2 layers, 4 heads, batch 1, "
           f"{args.threads} thread(s), random pixels), time limit {args.time_limit} s each:", "",
           "| image | tokens | " + " | ".join(f"{m}: train step s | {m}: forward s | {m}: peak MiB (train)"
                                             for m in methods) + " |",
           "|---|---|" + "---|---|---|" * len(methods)]
    for size in sorted({int(r["size"]) for r in rows}):
        cells = []
        for m in methods:
            step, fwd = (next(r for r in rows if int(r["size"]) == size and r["method"] == m and r["phase"] == p)
                         for p in ("train step", "forward"))
            show = lambda r: r["seconds"] if r["status"] == "ok" else f"{r['status']} ({r['seconds'] or '-'})"
            cells += [show(step), show(fwd), step["peak_rss_mib"] + (" (when stopped)" if step["status"] != "ok" else "")]
        out.append(f"| {size}x{size} | {size * size:,} | " + " | ".join(cells) + " |")
    out += ["", softmax_verdict(rows, args)]
    return "\n".join(out) + "\n"


def softmax_verdict(rows, args):
    failed = sorted((int(r["tokens"]), r) for r in rows if r["method"] == "softmax" and r["status"] not in ("ok", "not run"))
    if not any(r["method"] == "softmax" for r in rows):
        return "softmax was not measured."
    if not failed:
        return (f"softmax fitted at every size measured (time limit {args.time_limit} s, memory: this machine's "
                f"{available_mib():,.0f} MiB available).")
    tokens, r = failed[0]
    return (f"softmax no longer fits from N = {tokens:,} tokens ({r['size']}x{r['size']}): its {r['phase']} is "
            f"{r['status']} ({r['note']}).")


def available_mib():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable")) / 1024


def plot(rows, prefix):
    if shutil.which("gnuplot") is None:
        print("vit_scaling: gnuplot not found: no plot", file=sys.stderr)
        return
    methods = list(dict.fromkeys(r["method"] for r in rows))
    series = []
    for phase in ("train step", "forward"):
        for m in methods:
            path = pathlib.Path(f"{prefix}.{m}.{phase.split()[0]}.dat")
            ok = [r for r in rows if r["method"] == m and r["phase"] == phase and r["status"] == "ok"]
            path.write_text("".join(f"{r['tokens']} {r['seconds']} {r['peak_rss_mib']}\n" for r in ok))
            if ok:
                series.append((path, f"{m} {phase}", "lp" if phase == "forward" else "lp dt 2"))
    if not series:
        return
    plots = lambda col: ", ".join(f'"{p}" using 1:{col} with {style} title "{t}"' for p, t, style in series)
    script = f"""
set terminal pngcairo size 1100,440
set output "{prefix}.png.tmp"
set key top left noenhanced
set logscale xy
set xlabel "tokens (pixels)"
set multiplot layout 1,2
set ylabel "seconds"
plot {plots(2)}
set ylabel "peak memory of the process (MiB)"
plot {plots(3)}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    pathlib.Path(f"{prefix}.png.tmp").replace(f"{prefix}.png")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="examples:\n" +
                                     __doc__.rsplit("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64,128,256", help="image sides in pixels (default %(default)s)")
    parser.add_argument("--methods", default="softmax,linear", help="attentions (default %(default)s)")
    parser.add_argument("--time-limit", type=int, default=180,
                        help="seconds one measurement may take before it counts as not fitting (default 180)")
    parser.add_argument("--threads", type=int, default=1, help="threads per run (default 1)")
    parser.add_argument("--out", default="out/vit_scaling", help="results folder (default %(default)s)")
    parser.add_argument("--bin", default=os.environ.get("LINATTN_BIN", str(REPO / "build/tools/linattn")),
                        help="the linattn command (default $LINATTN_BIN or build/tools/linattn)")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",")]
        assert all(s >= 2 for s in args.sizes)
    except (ValueError, AssertionError):
        parser.error(f"--sizes {args.sizes!r}: expected comma-separated image sides of at least 2, e.g. 64,128,256")
    args.methods = [m for m in args.methods.split(",") if m]
    if args.time_limit < 1 or args.threads < 1:
        parser.error("--time-limit and --threads must be at least 1")
    if not os.access(args.bin, os.X_OK):
        parser.error(f"--bin {args.bin}: not an executable linattn command (build it: ninja -C build linattn_cli)")
    if not os.access("/usr/bin/time", os.X_OK):
        parser.error("/usr/bin/time is missing (it measures peak memory): scripts/setup.sh installs it")
    return args


def main(argv=None):
    args = parse(argv)
    out = pathlib.Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes:
        data = work / f"random_{size}.ds"
        if not data.exists():
            random_images(data, size)
        for method in args.methods:
            rows += measure(args, size, method, data, work)
            for r in rows[-2:]:
                print(f"vit_scaling: {size}x{size} {method} {r['phase']}: {r['status']} {r['seconds']} s, "
                      f"{r['peak_rss_mib'] or '-'} MiB {r['note']}", file=sys.stderr, flush=True)
    with open(out / "vit_scaling.csv", "w") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    (out / "vit_scaling.md").write_text(markdown(rows, args))
    plot(rows, str(out / "vit_scaling"))
    print((out / "vit_scaling.md").read_text())


if __name__ == "__main__":
    main()
