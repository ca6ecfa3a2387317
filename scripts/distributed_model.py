#!/usr/bin/env python3
"""The alpha-beta model of sequence-parallel attention (docs/distributed.md, "The model").

Predicts the time of one attention layer's forward pass per rank, and the bytes each rank sends, for
P ranks sharing a sequence of N tokens, for five ways of passing what a shard needs from the shards
before it:

  linattn_exscan   linattn_mpi: one exclusive scan of the shards' transforms, ceil(log2 P) rounds of sends
  lasp_ring        LASP: the state passed rank to rank, P - 1 sequential steps
  lasp2_allgather  LASP-2: one AllGather of every rank's state, each rank combining the earlier ones
  zeco_allscan     ZeCO: the All-Scan, the state split into k blocks pipelined along the chain
  ring_attention   softmax: the N/P-token k/v shards passed P - 1 times around the ring

The network is alpha-beta: a message of m bytes takes alpha + m / beta (defaults 2 us, 100 Gb/s;
--alpha-us, --gbps). The compute of one rank is measured here, with `linattn bench` on one thread (one
rank per core), at one shape (B, H, D, E), and scaled linearly in the shard's tokens (linear
attention) or quadratically in N (softmax); --speedup divides it for a faster rank. Nothing overlaps
in the linear methods (compute, then communication, then compute), so they differ in their
communication only; ring attention overlaps each step's transfer with that step's block.

Two byte counts per rank and layer: bytes_sent, by linattn_mpi's rule (include/linattn/distributed/
comm.hpp: the send buffer handed to each MPI call, once per call; the figure `linattn bench
--seq-parallel` reports), and wire_bytes, what the algorithm puts on the network (a scan's
ceil(log2 P) rounds, an AllGather's P - 1 states). --check-measured compares bytes_sent with the
measured JSON of `mpirun -np P linattn bench --seq-parallel --json` and exits 1 on any difference.

Outputs: docs/figures/distributed_model.{csv,png} (--out), the measured compute in
distributed_model_compute.json beside them (--compute reuses such a file instead of measuring).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOAT_BYTES = 4
# linattn_mpi's agreement: every distributed call starts with one MPI_Allgather of a fixed record per
# rank (src/distributed/agreement.cpp, struct Record: a 64-byte name, two int64, 24 int64 fields and a
# 448-byte message), counted in bytes_sent like any other call.
AGREEMENT_BYTES = 64 + 8 + 8 + 24 * 8 + 448

# The measured operator of each family (`linattn bench --op`) and the ops of the check.
FAMILY_OP = {"plain": "causal", "decayed": "gla", "delta": "delta_rule", "softmax": "softmax"}
# The delta rule's shard map (A, B) comes from one single-process pass with K + V value columns
# (values [0 | v] from the state [I | 0]: src/distributed/delta_scan.cpp), measured as such.
WIDE = "delta_wide"
OP_FAMILY = {
    "causal": "plain", "linear": "plain_noncausal",
    "retention": "decayed", "lightning": "decayed", "simple_gla": "decayed", "gla": "decayed",
    "delta_rule": "delta", "gated_delta_rule": "delta", "kda": "delta",
    "softmax": "softmax",
}
LINEAR_METHODS = ["linattn_exscan", "lasp_ring", "lasp2_allgather", "zeco_allscan"]


class Shape:
    """One layer: B sequences, H heads, key dim K (the feature dim M of plain attention), value dim V."""

    def __init__(self, batch, heads, dim, value_dim, feature_dim=None):
        self.B, self.H, self.D, self.V = batch, heads, dim, value_dim
        self.K = feature_dim if feature_dim else dim

    def heads_total(self):
        return self.B * self.H


# ---------------------------------------------------------------------------------------------------
# What travels: per (b, h) item, in floats.

def transform_floats(family, s):
    """The shard's state transform that linattn's scan (and LASP-2's AllGather) carries."""
    if family in ("plain", "plain_noncausal"):
        return s.K * s.V + s.K  # (S, z)
    if family == "decayed":
        return s.K * s.V + s.K  # (a, S): the shard's decay (one per key dim) and its state
    if family == "delta":
        return s.K * s.K + s.K * s.V  # (A, B): S -> A S + B
    raise ValueError(f"family {family!r}")


def state_floats(family, s):
    """The state alone, what a chain (LASP's ring, ZeCO's All-Scan) passes: the receiver applies its
    own shard's transform to it."""
    if family in ("plain", "plain_noncausal"):
        return s.K * s.V + s.K
    return s.K * s.V


def combine_flops(family, s):
    """Flops of one composition of two transforms (the scan's operator), per (b, h)."""
    if family in ("plain", "plain_noncausal"):
        return s.K * s.V + s.K  # additions
    if family == "decayed":
        return 2 * s.K * s.V + s.K  # (a a', diag(a') S + S')
    return 2 * s.K ** 3 + 2 * s.K * s.K * s.V  # (A' A, A' B + B')


def apply_flops(family, s):
    """Flops of applying one shard's transform to a state (a chain's step), per (b, h)."""
    if family in ("plain", "plain_noncausal"):
        return s.K * s.V + s.K
    if family == "decayed":
        return 2 * s.K * s.V
    return 2 * s.K * s.K * s.V


def extra_flops_per_token(family, s):
    """What a rank computes per token and (b, h) beyond its measured pass (linattn_mpi's plan,
    src/distributed/*_scan.cpp): plain and decayed form the shard's sums S_r = sum k v^T (2 K V) before
    the single-process pass from the entering state; the delta rule's widened pass gives its outputs
    from a zero state and u_t, finished as out_t += u_t S_in (2 K V)."""
    return 2 * s.K * s.V + (s.K if family != "delta" else 0)


# ---------------------------------------------------------------------------------------------------
# Bytes per rank and layer (forward), by linattn_mpi's rule (bytes_sent) and on the wire.

def ceil_log2(p):
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def scan_rounds(rank, P):
    """The rounds in which `rank` sends under linattn_mpi's recursive doubling (src/distributed/
    mpi_calls.cpp, exclusive_scan): one per mask 1, 2, 4, ... < P whose partner rank ^ mask exists."""
    rounds, mask = 0, 1
    while mask < P:
        rounds += (rank ^ mask) < P
        mask <<= 1
    return rounds


def bench_shards(N, P, op="causal", causal=False):
    """The shard lengths of `linattn bench --seq-parallel` (tools/commands/bench_seq_parallel.cpp,
    bench_ring.cpp): the linear ops N // P each, the last rank the rest; ring attention the first
    N mod P ranks one more, or under the causal (balanced) layout rank r blocks r and 2P - 1 - r of
    2P blocks of N // 2P (the first N mod 2P one more)."""
    if op != "softmax":
        return [N // P] * (P - 1) + [N - (P - 1) * (N // P)]
    if not causal:
        return [N // P + (r < N % P) for r in range(P)]
    block = [N // (2 * P) + (i < N % (2 * P)) for i in range(2 * P)]
    return [block[r] + block[2 * P - 1 - r] for r in range(P)]


def linattn_bytes_sent(op, s, lengths, backward=False):
    """What `linattn bench --seq-parallel` reports (the largest over ranks, per call), by the rule of
    include/linattn/distributed/comm.hpp, for shards of these lengths (one per rank)."""
    family = OP_FAMILY[op]
    P = len(lengths)
    if family == "softmax":
        per_token = FLOAT_BYTES * s.B * s.H * (s.D + s.V)
        # forward: the agreement, then rank r passes on every shard but its successor's, P - 1
        # sends; backward (include/linattn/distributed/ring.hpp): its own agreement, the k/v shards
        # again and every shard's dk/dv accumulator once, P sends.
        if P == 1:  # one rank passes nothing
            return AGREEMENT_BYTES * (2 if backward else 1)
        kv = max(sum(lengths) - lengths[(r + 1) % P] for r in range(P)) * per_token
        fwd = AGREEMENT_BYTES + kv
        bwd = AGREEMENT_BYTES + kv + sum(lengths) * per_token
        return fwd + (bwd if backward else 0)
    item = FLOAT_BYTES * s.heads_total() * transform_floats(family, s)
    if family == "plain_noncausal":
        # the agreement and one Allreduce of (S, z), counted once; the backward: its agreement and two.
        return AGREEMENT_BYTES + item + ((AGREEMENT_BYTES + 2 * item) if backward else 0)
    # forward: the agreement and the scan of the transforms, one item per round the rank sends in;
    # backward: its agreement, the forward's scan again (the entering states) and the reverse scan of
    # the state gradients over the reversed ranks (rank r is P - 1 - r there), items of the same size.
    def sent(r):
        fwd = AGREEMENT_BYTES + scan_rounds(r, P) * item
        bwd = AGREEMENT_BYTES + (scan_rounds(r, P) + scan_rounds(P - 1 - r, P)) * item
        return fwd + (bwd if backward else 0)
    return max(sent(r) for r in range(P))


def method_bytes(method, family, s, P, N):
    """(bytes_sent by linattn_mpi's rule, wire bytes) per rank for one forward pass."""
    n = N / P
    if method == "ring_attention":
        shard = FLOAT_BYTES * s.B * n * s.H * (s.D + s.V)
        return AGREEMENT_BYTES + (P - 1) * shard, (P - 1) * shard
    item = FLOAT_BYTES * s.heads_total() * transform_floats(family, s)
    state = FLOAT_BYTES * s.heads_total() * state_floats(family, s)
    if method == "linattn_exscan":
        # recursive doubling over MPI_Sendrecv: one item a round, on the wire and counted alike
        return AGREEMENT_BYTES + ceil_log2(P) * item, ceil_log2(P) * item
    if method == "lasp_ring":
        return state, state  # one send (the last rank sends none)
    if method == "lasp2_allgather":
        return item, (P - 1) * item  # its own item; every rank's reaches every other
    if method == "zeco_allscan":
        return state, state  # the state once, in k pieces
    raise ValueError(method)


# ---------------------------------------------------------------------------------------------------
# Time per layer (forward).

class Network:
    def __init__(self, alpha_s, beta_bytes_per_s):
        self.alpha, self.beta = alpha_s, beta_bytes_per_s

    def message(self, nbytes):
        return self.alpha + nbytes / self.beta


class Compute:
    """Seconds of one rank's work, from the measured single-process passes (one thread)."""

    def __init__(self, measured, s, speedup, parallel=None):
        self.m, self.s, self.speedup = measured, s, speedup
        self.parallel = parallel or {}

    def per_token(self, family):
        return self.m[family]["seconds"] / self.m[family]["tokens"]

    def flop_rate(self, family):
        return self.m[family]["flops"] / self.m[family]["seconds"]

    def local(self, family, n):
        """The rank's local work on its n tokens: its pass (the delta rule's widened one) and the rest
        of linattn_mpi's plan at the pass's measured flop rate."""
        if family in self.parallel:  # measured compute_seconds of the parallel operator, per token
            return self.parallel[family] * n / self.speedup
        measured = WIDE if family == "delta" else family
        pass_seconds = self.per_token(measured) * n
        extra = extra_flops_per_token(family, self.s) * self.s.heads_total() * n / self.flop_rate(measured)
        return (pass_seconds + extra) / self.speedup

    def flops(self, family, flops):
        return flops * self.s.heads_total() / self.flop_rate(family) / self.speedup

    def softmax_total(self, N):
        """Causal softmax over all N tokens on one rank: the measured time scaled by N^2."""
        m = self.m["softmax"]
        return m["seconds"] * (N / m["tokens"]) ** 2 / self.speedup


def zeco_time(P, nbytes, t_apply, net):
    """The All-Scan: the state in k pieces down a chain of P ranks, each piece applied and passed on
    as soon as it arrives: (P - 1 + k - 1) steps of one piece; the best k."""
    if P == 1:
        return 0.0, 1
    best = None
    k = 1
    while k <= 4096:
        t = (P - 1 + k - 1) * (net.alpha + nbytes / k / net.beta + t_apply / k)
        if best is None or t < best[0]:
            best = (t, k)
        k *= 2
    return best


def layer_time(method, family, P, N, s, net, comp):
    """(compute seconds, communication seconds, total) of one forward layer on the slowest rank."""
    n = N / P
    if method == "ring_attention":
        total = comp.softmax_total(N)  # causal, load-balanced: every rank the same share
        block = total / P / P  # one step's block pair
        shard = FLOAT_BYTES * s.B * n * s.H * (s.D + s.V)
        step_comm = net.message(shard)
        t = block + (P - 1) * max(block, step_comm)
        return total / P, t - total / P, t
    compute = comp.local(family, n)
    item = FLOAT_BYTES * s.heads_total() * transform_floats(family, s)
    state = FLOAT_BYTES * s.heads_total() * state_floats(family, s)
    if method == "linattn_exscan":
        comm = ceil_log2(P) * (net.message(item) + comp.flops(family, combine_flops(family, s)))
    elif method == "lasp_ring":
        comm = (P - 1) * (net.message(state) + comp.flops(family, apply_flops(family, s)))
    elif method == "lasp2_allgather":
        # recursive doubling: ceil(log2 P) latencies, (P - 1) items through each rank's link; then
        # the last rank combines the P - 1 earlier items.
        comm = ceil_log2(P) * net.alpha + (P - 1) * item / net.beta
        comm += (P - 1) * comp.flops(family, combine_flops(family, s))
    elif method == "zeco_allscan":
        comm, _ = zeco_time(P, state, comp.flops(family, apply_flops(family, s)), net)
    else:
        raise ValueError(method)
    return compute, comm, compute + comm


# ---------------------------------------------------------------------------------------------------
# Measuring and checking.

def bench(binary, op, s, seq, threads, budget, causal=False, value_dim=None):
    cmd = [binary, "bench", "--op", op, "--batch", str(s.B), "--heads", str(s.H), "--seq", str(seq),
           "--dim", str(s.D), "--value-dim", str(value_dim or s.V), "--threads", str(threads), "--budget", str(budget),
           "--min-reps", "3", "--json"]
    if causal:
        cmd.append("--causal")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    j = json.loads(out.strip().splitlines()[-1])
    shown = [os.path.relpath(binary, ROOT) if os.path.abspath(binary).startswith(ROOT + os.sep) else binary] + cmd[1:]
    return {"op": op, "command": " ".join(shown), "seconds": j["seconds"], "seconds_min": j["seconds_min"],
            "flops": j["flops"], "tokens": s.B * seq, "seq": seq, "repetitions": j["repetitions"]}


def measure(args, s):
    measured = {}
    for family, op in list(FAMILY_OP.items()) + [(WIDE, "delta_rule")]:
        seq = args.softmax_seq if family == "softmax" else args.measure_seq
        measured[family] = bench(args.bin, op, s, seq, args.threads, args.budget, causal=(family == "softmax"),
                                 value_dim=s.K + s.V if family == WIDE else None)
        m = measured[family]
        print(f"measured {family:8s} ({op}, N = {seq}): {m['seconds'] * 1e3:.2f} ms median, "
              f"{m['seconds'] / m['tokens'] * 1e6:.3f} us per token, {m['flops'] / m['seconds'] * 1e-9:.2f} GFLOP/s",
              file=sys.stderr)
    return measured


def load_json_objects(path):
    """One JSON object per line (or one array) from `linattn bench --seq-parallel --json` runs."""
    with open(path) as f:
        text = f.read().strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def check_measured(path):
    """Compares each measured bytes_sent with the model's; returns the number of mismatches."""
    rows = load_json_objects(path)
    if not rows:
        print(f"check-measured: {path}: no JSON objects", file=sys.stderr)
        return 1
    bad = 0
    for r in rows:
        for key in ("op", "batch", "heads", "seq", "dim", "ranks", "bytes_sent"):
            if key not in r:
                print(f"check-measured: {path}: an object without {key!r}: {r}", file=sys.stderr)
                return 1
        s = Shape(r["batch"], r["heads"], r["dim"], r.get("value_dim") or r["dim"], r.get("feature_dim"))
        P = r["ranks"]
        lengths = bench_shards(r["seq"], P, r["op"], bool(r.get("causal")))
        model = linattn_bytes_sent(r["op"], s, lengths, bool(r.get("backward")))
        ok = int(model) == int(r["bytes_sent"])
        bad += 0 if ok else 1
        print(f"{'ok  ' if ok else 'DIFF'} op={r['op']} P={P} N={r['seq']} B={s.B} H={s.H} D={s.D} E={s.V}"
              f"{' backward' if r.get('backward') else ''}: measured {r['bytes_sent']} bytes, model {int(model)}")
    return bad


# ---------------------------------------------------------------------------------------------------

def model_rows(s, net, comp, ranks_list, seqs):
    # One series (method, family, N) after another, P ascending: gnuplot draws a line through
    # consecutive selected rows only.
    rows = []
    for N in seqs:
        for family in ("plain", "decayed", "delta"):
            for method in LINEAR_METHODS:
                rows += [row(method, family, P, N, s, net, comp) for P in ranks_list]
        rows += [row("ring_attention", "softmax", P, N, s, net, comp) for P in ranks_list]
    return rows


def row(method, family, P, N, s, net, comp):
    compute, comm, total = layer_time(method, family, P, N, s, net, comp)
    sent, wire = method_bytes(method, family, s, P, N)
    return {"method": method, "family": family, "ranks": P, "seq": N, "tokens_per_rank": N // P,
            "compute_seconds": compute, "comm_seconds": comm, "seconds": total,
            "bytes_sent": int(sent), "wire_bytes": int(wire)}


def write_csv(rows, path):
    keys = list(rows[0].keys())
    with open(path, "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(f"{r[k]:.6g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + "\n")


GNUPLOT = r"""
set terminal pngcairo size 1200,900 noenhanced font ',10'
set output '{png}'
set datafile separator ','
set multiplot layout 2,2 title '{title}'
set logscale xy
set grid
set xlabel 'ranks P'
set xtics (8, 16, 32, 64, 128, 256, 512, 1024)
set xrange [6:1400]
set key bottom left font ',9'
set style data linespoints
sel(m, f, n) = (strcol(1) eq m && strcol(2) eq f && $4 == n)
methods = 'linattn_exscan lasp_ring lasp2_allgather zeco_allscan'
set title 'time per layer, plain linear attention (forward), N = {n_small}'
set ylabel 'seconds'
plot for [m in methods] '{csv}' using 3:(sel(m, 'plain', {n_small}) ? $8 : 1/0) lw 2 title m, \
     '{csv}' using 3:(sel('ring_attention', 'softmax', {n_small}) ? $8 : 1/0) lw 2 dt 2 title 'ring_attention (softmax)'
set title 'time per layer, plain linear attention (forward), N = {n_large}'
plot for [m in methods] '{csv}' using 3:(sel(m, 'plain', {n_large}) ? $8 : 1/0) lw 2 title m, \
     '{csv}' using 3:(sel('ring_attention', 'softmax', {n_large}) ? $8 : 1/0) lw 2 dt 2 title 'ring_attention (softmax)'
set key top left
set title 'communication per layer (any N for the linear methods); delta rule dashed'
plot for [m in methods] '{csv}' using 3:(sel(m, 'plain', {n_small}) ? $7 : 1/0) lw 2 title m.' plain', \
     for [i=1:4] '{csv}' using 3:(sel(word(methods, i), 'delta', {n_small}) ? $7 : 1/0) \
       lw 1 dt 2 lc i title word(methods, i).' delta'
set title 'bytes on the wire per rank and layer (linear: any N; ring attention at N = {n_small})'
set ylabel 'bytes'
plot for [m in methods] '{csv}' using 3:(sel(m, 'plain', {n_small}) ? $10 : 1/0) lw 2 title m.' plain', \
     '{csv}' using 3:(sel('ring_attention', 'softmax', {n_small}) ? $10 : 1/0) lw 2 dt 2 title 'ring_attention'
unset multiplot
"""


def plot(csv_path, png_path, s, net, seqs, speedup):
    if not shutil.which("gnuplot"):
        print("distributed_model: gnuplot not found: no plot", file=sys.stderr)
        return
    title = (f"alpha-beta model: alpha = {net.alpha * 1e6:g} us, beta = {net.beta * 8e-9:g} Gb/s; "
             f"B = {s.B}, H = {s.H}, D = {s.D}, E = {s.V}; compute of one core of this machine"
             + (f" / {speedup:g}" if speedup != 1 else ""))
    script = GNUPLOT.format(png=os.path.basename(png_path), csv=os.path.basename(csv_path), title=title,
                            n_small=min(seqs), n_large=max(seqs))
    subprocess.run(["gnuplot"], input=script, text=True, check=True, cwd=os.path.dirname(png_path) or ".")


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--bin", default=os.environ.get("LINATTN_BIN", os.path.join(root, "build/tools/linattn")),
                   help="the linattn command (default build/tools/linattn, or $LINATTN_BIN)")
    p.add_argument("--alpha-us", type=float, default=2.0, help="network latency per message, microseconds")
    p.add_argument("--gbps", type=float, default=100.0, help="network bandwidth per rank, gigabits per second")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--dim", type=int, default=128, help="D (= K, the key dim, for the built-in feature maps)")
    p.add_argument("--value-dim", type=int, default=0, help="E (default D)")
    p.add_argument("--measure-seq", type=int, default=8192, help="N of the measured linear passes")
    p.add_argument("--softmax-seq", type=int, default=2048, help="N of the measured causal softmax")
    p.add_argument("--threads", type=int, default=1, help="threads of the measured rank (one rank per core)")
    p.add_argument("--budget", type=float, default=2.0, help="seconds of repetitions per measurement")
    p.add_argument("--speedup", type=float, default=1.0, help="divide the measured compute by this")
    p.add_argument("--ranks", default="8,16,32,64,128,256,512,1024")
    p.add_argument("--seqs", default=f"{2**20},{10 * 2**20},{100 * 2**20}", help="N values (tokens)")
    p.add_argument("--compute", help="reuse a distributed_model_compute.json instead of measuring")
    p.add_argument("--compute-from", help="JSON of `mpirun -np P linattn bench --seq-parallel --json` runs: "
                   "their compute_seconds per token replace the estimate of the parallel operators' compute")
    p.add_argument("--out", default=os.path.join(root, "docs/figures"), help="folder of the csv and png")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--check-measured", metavar="FILE.json",
                   help="only compare the model's bytes_sent with these measured runs; exit 1 on a difference")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if args.check_measured:
        bad = check_measured(args.check_measured)
        print(f"check-measured: {'all equal' if bad == 0 else f'{bad} differ'}")
        return 1 if bad else 0
    s = Shape(args.batch, args.heads, args.dim, args.value_dim or args.dim)
    net = Network(args.alpha_us * 1e-6, args.gbps * 1e9 / 8)
    os.makedirs(args.out, exist_ok=True)
    compute_path = os.path.join(args.out, "distributed_model_compute.json")
    if args.compute:
        with open(args.compute) as f:
            saved = json.load(f)
        measured = saved["measured"]
        s = Shape(**saved["shape"])
    else:
        if not os.access(args.bin, os.X_OK):
            print(f"distributed_model: {args.bin} not found: build the linattn_cli target (or pass --bin, "
                  f"or --compute FILE)", file=sys.stderr)
            return 2
        measured = measure(args, s)
        with open(compute_path, "w") as f:
            json.dump({"shape": {"batch": s.B, "heads": s.H, "dim": s.D, "value_dim": s.V},
                       "threads": args.threads, "load_average": os.getloadavg(), "measured": measured}, f, indent=1)
            f.write("\n")
    parallel = {}
    if args.compute_from:
        for r in load_json_objects(args.compute_from):
            fam = OP_FAMILY[r["op"]]
            if r["ranks"] > 1 and "compute_seconds" in r:
                parallel[fam] = r["compute_seconds"] / (r["batch"] * r["seq"] / r["ranks"])
    comp = Compute(measured, s, args.speedup, parallel)
    ranks_list = [int(x) for x in args.ranks.split(",")]
    seqs = [int(x) for x in args.seqs.split(",")]
    rows = model_rows(s, net, comp, ranks_list, seqs)
    csv_path = os.path.join(args.out, "distributed_model.csv")
    write_csv(rows, csv_path)
    if not args.no_plot:
        plot(csv_path, os.path.join(args.out, "distributed_model.png"), s, net, seqs, args.speedup)
    print(f"distributed_model: {len(rows)} rows in {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
