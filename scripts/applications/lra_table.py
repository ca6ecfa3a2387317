#!/usr/bin/env python3
"""The table of scripts/reproduce_applications.sh, in the Long Range Arena's layout (Tay et al., 2020, Table 1).

  lra_table.py row TASK MODEL STATUS [--eval-json F --train-csv F --time-v F ...]   one pair's CSV (header + row)
  lra_table.py table --pairs DIR --out PREFIX [--budget-minutes M]    PREFIX.csv, PREFIX.md and PREFIX.png

STATUS is "ok" for a pair that trained and was evaluated; anything else ("not built: ...", "failed: ...")
is kept as the pair's note and shown in the table.
"""
import argparse
import csv
import json
import pathlib
import re
import shutil
import subprocess
import sys

TASKS = ("listops", "pathfinder", "image", "speech")
TASK_TITLES = {"listops": "ListOps", "pathfinder": "Pathfinder", "image": "Image", "speech": "Speech"}
MODELS = ("softmax", "linear", "performer", "linformer", "gla", "gated_deltanet")
MODEL_TITLES = {"softmax": "Transformer (softmax)", "linear": "Linear Transformer (elu+1)",
                "performer": "Performer (FAVOR+)", "linformer": "Linformer", "gla": "GLA (both directions)",
                "gated_deltanet": "Gated DeltaNet (both directions)"}
# Tay et al. (2020), Table 1: test accuracy (%). The LRA has no speech task and no GLA or Gated DeltaNet row.
LRA = {"softmax": {"listops": 36.37, "image": 42.44, "pathfinder": 71.40},
       "linear": {"listops": 16.13, "image": 42.34, "pathfinder": 75.30},
       "performer": {"listops": 18.01, "image": 42.77, "pathfinder": 77.05},
       "linformer": {"listops": 35.70, "image": 38.56, "pathfinder": 76.34}}
COLUMNS = ("task", "model", "status", "accuracy", "test_examples", "seq_len", "train_tokens_per_s",
           "train_tokens_per_cpu_s", "peak_rss_mib", "steps", "train_seconds", "budget_seconds", "note")


def time_v_field(time_v, label):
    """A number from GNU time -v's report, e.g. "Maximum resident set size (kbytes)"."""
    match = re.search(re.escape(label) + r": ([0-9.]+)", pathlib.Path(time_v).read_text())
    if match is None:
        raise SystemExit(f"lra_table: {time_v} has no '{label}' line (is it GNU time -v's output?)")
    return float(match.group(1))


def last_report(train_csv, train_log):
    """The training run's last progress report: {"step", "tokens_per_s"} (train's average since its first
    step). From --csv, which train writes at its end; a run stopped by the budget's SIGTERM wrote none, so
    then from the last progress line of its log ("step 108/359 ... tok/s 3377")."""
    if pathlib.Path(train_csv).exists() or train_log is None:
        rows = [r for r in csv.DictReader(open(train_csv)) if r["tokens_per_s"]]
    else:
        lines = re.findall(r"^step\s+(\d+)/\d+ .*tok/s\s+([0-9.]+)", pathlib.Path(train_log).read_text(), re.M)
        rows = [{"step": step, "tokens_per_s": rate} for step, rate in lines]
    if not rows:
        raise SystemExit(f"lra_table: neither {train_csv} nor {train_log} has a progress report with tokens/s")
    return rows[-1]


def row_command(args):
    row = dict.fromkeys(COLUMNS, "")
    row.update(task=args.task, model=args.model, status="ok" if args.status == "ok" else args.status.split(":")[0])
    if args.status == "ok":
        result = json.loads(pathlib.Path(args.eval_json).read_text())
        last = last_report(args.train_csv, args.train_log)
        # Tokens per CPU second (user + system, the whole process: setup and the last validation batch
        # included) hardly move with the machine's load, where tokens per wall second do.
        cpu_s = time_v_field(args.time_v, "User time (seconds)") + time_v_field(args.time_v, "System time (seconds)")
        per_cpu = int(last["step"]) * int(args.step_tokens) / cpu_s if args.step_tokens and cpu_s > 0 else None
        row.update(accuracy=f"{result['accuracy']:.4f}", test_examples=result.get("examples", ""),
                   seq_len=result.get("seq_len", ""), train_tokens_per_s=f"{float(last['tokens_per_s']):.0f}",
                   train_tokens_per_cpu_s=f"{per_cpu:.0f}" if per_cpu else "",
                   peak_rss_mib=f"{time_v_field(args.time_v, 'Maximum resident set size (kbytes)') / 1024:.0f}",
                   steps=last["step"],
                   train_seconds=args.train_seconds, budget_seconds=args.budget_seconds,
                   note=args.note + (f" (last report at step {last['step']} of {args.steps})"
                                     if args.steps and int(last["step"]) < int(args.steps) else ""))
    else:
        row["note"] = args.status.partition(":")[2].strip().replace("linattn: error: ", "")
    writer = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)


def cell(row, column, fmt):
    if row is None:
        return "not run"
    if row["status"] != "ok":
        return row["status"]
    return fmt(float(row[column])) if row.get(column) else "-"


def markdown(rows, budget_minutes):
    """The three tables: accuracy beside LRA's, training tokens/s, peak memory; then each pair's details."""
    lengths = {t: next((r["seq_len"] for (task, _), r in rows.items() if task == t and r["seq_len"]), "?") for t in TASKS}
    head = " | ".join(f"{TASK_TITLES[t]} (LRA)" if t != "speech" else "Speech" for t in TASKS)
    budgets = sorted({int(r["budget_seconds"]) for r in rows.values() if r["budget_seconds"]})
    budget = (f"a budget of {' or '.join(f'{b} s' for b in budgets)} of training a pair (each pair's below)"
              if budgets else f"about {budget_minutes} min of training a pair")
    out = [f"Test accuracy (%), one run each, {budget} on this machine; LRA's Table 1 in brackets:", "",
           f"| model | {head} |", "|---" * (len(TASKS) + 1) + "|"]
    for m in MODELS:
        cells = []
        for t in TASKS:
            ours = cell(rows.get((t, m)), "accuracy", lambda a: f"{100 * a:.2f}")
            lra = LRA.get(m, {}).get(t)
            cells.append(ours + (f" ({lra:.2f})" if lra is not None else ""))
        out.append(f"| {MODEL_TITLES[m]} | {' | '.join(cells)} |")
    for title, column, fmt in (("Training tokens per wall second (train's average, padding included)",
                                "train_tokens_per_s", lambda v: f"{v:,.0f}"),
                               ("Training tokens per CPU second (user + system time of the training process)",
                                "train_tokens_per_cpu_s", lambda v: f"{v:,.0f}"),
                               ("Peak memory of the training process (MiB, GNU time's maximum resident set)",
                                "peak_rss_mib", lambda v: f"{v:,.0f}")):
        out += ["", f"{title}:", "", "| model | " + " | ".join(f"{TASK_TITLES[t]} ({lengths[t]} tokens)" for t in TASKS)
                + " |", "|---" * (len(TASKS) + 1) + "|"]
        out += [f"| {MODEL_TITLES[m]} | " + " | ".join(cell(rows.get((t, m)), column, fmt) for t in TASKS) + " |"
                for m in MODELS]
    out += ["", "Each pair:", "", "| task | model | status | budget s | steps | train s | test examples | note |",
            "|---|---|---|---|---|---|---|---|"]
    for (t, m), r in sorted(rows.items(), key=lambda kv: (TASKS.index(kv[0][0]), MODELS.index(kv[0][1]))):
        out.append(f"| {t} | {m} | {r['status']} | {r['budget_seconds']} | {r['steps']} | {r['train_seconds']} | "
                   f"{r['test_examples']} | "
                   f"{r['note']} |")
    return "\n".join(out) + "\n"


def plot(rows, prefix):
    """PREFIX.png: accuracy and training tokens per CPU second (which a loaded machine moves least) per task,
    a bar per model (gnuplot); skipped without gnuplot."""
    if shutil.which("gnuplot") is None:
        print("lra_table: gnuplot not found: no plot", file=sys.stderr)
        return
    ok = {key for key, r in rows.items() if r["status"] == "ok"}
    models = [m for m in MODELS if any((t, m) in ok for t in TASKS)]
    tasks = [t for t in TASKS if any((t, m) in ok for m in MODELS)]
    if not ok:
        print("lra_table: no pair trained: no plot", file=sys.stderr)
        return
    data = pathlib.Path(f"{prefix}.dat")
    with data.open("w") as f:
        for column, scale in (("accuracy", 100), ("train_tokens_per_cpu_s", 1)):
            f.write("task " + " ".join(models) + "\n")
            for t in tasks:
                values = [rows.get((t, m)) for m in models]
                f.write(TASK_TITLES[t] + " " + " ".join(
                    f"{float(r[column]) * scale:g}" if r and r["status"] == "ok" and r[column] else "NaN"
                    for r in values) + "\n")
            f.write("\n\n")
    script = f"""
set terminal pngcairo size 1300,520
set output "{prefix}.png.tmp"
set style data histograms
set style histogram clustered gap 1
set key noenhanced
set style fill solid 0.8 border -1
set key outside below center horizontal
set multiplot layout 1,2
set ylabel "test accuracy (%)"; set yrange [0:*]
plot for [c=2:{len(models) + 1}] "{data}" index 0 using c:xtic(1) title columnheader(c)
set ylabel "training tokens per CPU second"; set logscale y; set yrange [*:*]
plot for [c=2:{len(models) + 1}] "{data}" index 1 using c:xtic(1) title columnheader(c)
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    pathlib.Path(f"{prefix}.png.tmp").replace(f"{prefix}.png")


def table_command(args):
    rows = {}
    for path in sorted(pathlib.Path(args.pairs).glob("*.csv")):
        for r in csv.DictReader(path.open()):
            rows[(r["task"], r["model"])] = {c: r.get(c) or "" for c in COLUMNS}
    if not rows:
        raise SystemExit(f"lra_table: no pair results in {args.pairs}: run scripts/reproduce_applications.sh first")
    with open(f"{args.out}.csv", "w") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows.values())
    pathlib.Path(f"{args.out}.md").write_text(markdown(rows, args.budget_minutes))
    plot(rows, args.out)
    print(pathlib.Path(f"{args.out}.md").read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    row = sub.add_parser("row")
    row.add_argument("task", choices=TASKS)
    row.add_argument("model", choices=MODELS)
    row.add_argument("status")
    for flag in ("--eval-json", "--train-csv", "--train-log", "--time-v", "--steps", "--step-tokens", "--train-seconds",
                 "--budget-seconds"):
        row.add_argument(flag)
    row.add_argument("--note", default="")
    table = sub.add_parser("table")
    table.add_argument("--pairs", required=True)
    table.add_argument("--out", required=True)
    table.add_argument("--budget-minutes", default="?")
    args = parser.parse_args(argv)
    if args.command == "row" and args.status == "ok" and not (args.eval_json and args.train_csv and args.time_v):
        parser.error("row ... ok needs --eval-json, --train-csv and --time-v (and --train-log for a stopped run)")
    (row_command if args.command == "row" else table_command)(args)


if __name__ == "__main__":
    main()
