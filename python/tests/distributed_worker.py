"""One rank of test_distributed.py, run under mpiexec: linattn.distributed on this rank's shard of a
sequence that every rank draws alike, against the single-process linattn.torch on the whole of it.

Every rank checks its own rows (outputs and gradients of q, k and v through torch's autograd, and the
numpy functions) and that a second run gives the same bits; a failure raises, so mpiexec exits
non-zero. argv: the shard lengths, comma-separated (one per rank; 0 allowed).
"""
import sys

import numpy as np
import torch
from mpi4py import MPI

import linattn.distributed as dist
import linattn.torch as lt
from linattn import _linattn

TOL = 2e-5  # max |distributed - single process| / max |single process|, fp32 sums in another order


def relative_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if want.size == 0:
        return 0.0
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    lengths = [int(x) for x in sys.argv[1].split(",")]
    if len(lengths) != comm.Get_size():
        raise SystemExit(f"worker: {len(lengths)} shard lengths for {comm.Get_size()} ranks")
    B, H, D, E = 2, 3, 16, 8
    N = sum(lengths)
    begin = sum(lengths[:rank])
    end = begin + lengths[rank]
    g = torch.Generator().manual_seed(1234)
    q = torch.randn(B, N, H, D, generator=g)
    k = torch.randn(B, N, H, D, generator=g)
    v = torch.randn(B, N, H, E, generator=g)
    w = torch.randn(B, N, H, E, generator=g)  # the loss: sum(out * w)

    for causal in (True, False):
        # The whole sequence on one process.
        qf, kf, vf = (x.clone().requires_grad_() for x in (q, k, v))
        ref = lt.linear_attention(qf, kf, vf, layout="bnhd", causal=causal)
        (ref * w).sum().backward()

        def sharded():
            qs, ks, vs = (x[:, begin:end].clone().requires_grad_() for x in (q, k, v))
            out = dist.torch_linear_attention(comm, qs, ks, vs, layout="bnhd", causal=causal)
            (out * w[:, begin:end]).sum().backward()
            return out.detach(), qs.grad, ks.grad, vs.grad

        first, second = sharded(), sharded()
        names = ("out", "dq", "dk", "dv")
        wants = (ref.detach(), qf.grad, kf.grad, vf.grad)
        for name, got, again, want in zip(names, first, second, wants):
            want = want[:, begin:end]
            assert got.shape == want.shape, (name, got.shape, want.shape)
            err = relative_error(got, want)
            assert err < TOL, f"rank {rank} causal={causal} {name}: error {err:.3g} > {TOL}"
            assert torch.equal(got, again), f"rank {rank} causal={causal} {name}: two runs differ"

        # The numpy functions give the autograd path's numbers.
        arrays = [x[:, begin:end].numpy() for x in (q, k, v)]
        out = dist.linear_attention(comm, *arrays, causal=causal)
        np.testing.assert_array_equal(out, first[0].numpy())
        grads = dist.linear_attention_backward(comm, *arrays, w[:, begin:end].contiguous().numpy(), causal=causal)
        for name, got, want in zip(names[1:], grads, first[1:]):
            np.testing.assert_array_equal(got, want.numpy(), err_msg=name)

    check_families(comm, lengths, begin, end)
    check_ring(comm, lengths, begin, end)

    # Shapes that disagree between ranks: every rank raises, naming the rank at fault (rank 1 here).
    if comm.Get_size() > 1:
        dim = D + (1 if rank == 1 else 0)
        x = np.zeros((B, lengths[rank], H, dim), np.float32)
        try:
            dist.linear_attention(comm, x, x, np.zeros((B, lengths[rank], H, E), np.float32), causal=True)
        except ValueError as e:
            assert "rank 1" in str(e), str(e)
        else:
            raise AssertionError(f"rank {rank}: a head dim that differs on rank 1 was not refused")
    if comm.Get_size() > 1:
        check_local_failures(comm, lengths)
    stats = dist.comm_stats()
    assert stats["bytes_sent"] > 0 and stats["calls"] > 0, stats
    comm.Barrier()
    if rank == 0:
        print(f"distributed_worker: {comm.Get_size()} ranks, shards {lengths}: ok")


def check_local_failures(comm, lengths):
    """An argument that only rank 1 gets wrong in a way the binding refuses before the operation starts
    (float64 or 3-d q, a scale that is no number, a float64 tensor, a bad layout): every rank raises
    ValueError naming rank 1 and the argument, and none waits forever (issue 42 item 5; the job's timeout
    would end a hang)."""
    rank, n = comm.Get_rank(), lengths[comm.Get_rank()]
    x = np.zeros((1, n, 2, 4), np.float32)
    g = np.zeros((1, n, 2), np.float32)
    bad_q = {"float64": x.astype(np.float64), "3-d": x[0]}
    t = torch.zeros(1, n, 2, 4)
    calls = {
        "decayed_attention q float64": (lambda q: dist.decayed_attention(comm, q, x, x, g, decay="simple_gla"), "q", "float64"),
        "delta_rule q 3-d": (lambda q: dist.delta_rule(comm, q, x, x, g), "q", "3-d"),
        "linear_attention q float64": (lambda q: dist.linear_attention(comm, q, x, x, causal=True), "q", "float64"),
        "ring_attention q 3-d": (lambda q: dist.ring_attention(comm, q, x, x), "q", "3-d"),
        "decayed_attention scale": (lambda _: dist.decayed_attention(
            comm, x, x, x, g, decay="simple_gla", scale="abc" if rank == 1 else None), "scale", None),
        "delta_rule chunk_size": (lambda _: dist.delta_rule(
            comm, x, x, x, g, chunk_size="big" if rank == 1 else 64), "chunk_size", None),
        "torch_delta_rule float64": (lambda _: dist.torch_delta_rule(
            comm, t.double() if rank == 1 else t, t, t, torch.zeros(1, n, 2)), "float32", None),
        "torch_ring_attention layout": (lambda _: dist.torch_ring_attention(
            comm, t, t, t, layout="bad" if rank == 1 else "bnhd"), "layout", None),
    }
    for name, (call, argument, kind) in calls.items():
        q = bad_q[kind] if kind is not None and rank == 1 else x
        try:
            call(q)
        except ValueError as e:
            assert "rank 1" in str(e) and argument in str(e), f"rank {rank} {name}: {e}"
        else:
            raise AssertionError(f"rank {rank} {name}: rank 1's bad argument was not refused on this rank")


def check_families(comm, lengths, begin, end):
    """GLA (a decay per key) and Gated DeltaNet (a decay per token), through torch's autograd, against
    the single-process numpy forward and backward of the whole sequence; each also with two value heads per
    q/k head (grouped value heads: v, the gates, beta and dout with 2H heads)."""
    for group in (1, 2):
        _check_families(comm, lengths, begin, end, group)


def _check_families(comm, lengths, begin, end, group):
    rank = comm.Get_rank()
    B, H, K, V = 1, 2, 8, 8
    HV = H * group
    N = sum(lengths)
    r = np.random.default_rng(99 + group)
    q, k = (r.standard_normal((B, N, H, K)).astype(np.float32) for _ in range(2))
    v, dout = (r.standard_normal((B, N, HV, V)).astype(np.float32) for _ in range(2))
    gla_g = (np.log(1 / (1 + np.exp(-r.standard_normal((B, N, HV, K))))) / 16).astype(np.float32)
    kn = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)  # the delta rule's unit keys
    qn = (q / np.linalg.norm(q, axis=-1, keepdims=True)).astype(np.float32)
    beta = (1 / (1 + np.exp(-r.standard_normal((B, N, HV))))).astype(np.float32)
    gdn_g = (np.log(1 / (1 + np.exp(-r.standard_normal((B, N, HV))))) / 16).astype(np.float32)
    cases = [
        ("gla", (q, k, v, gla_g), dict(decay="gla"), _linattn.decayed_attention, _linattn.decayed_attention_backward,
         dist.torch_decayed_attention),
        ("gated_delta_rule", (qn, kn, v, beta, gdn_g), dict(gate="gated_delta_rule"), _linattn.delta_rule,
         _linattn.delta_rule_backward, dist.torch_delta_rule),
    ]
    for name, inputs, options, forward, backward, sharded in cases:
        name = f"{name} (value heads {HV} over {H})"
        want_out = forward(*inputs, **options)[0]
        want_grads = backward(*inputs, dout, **options)[: len(inputs)]
        tensors = [torch.from_numpy(x[:, begin:end].copy()).requires_grad_() for x in inputs]
        out = sharded(comm, *tensors, **options)
        (out * torch.from_numpy(dout[:, begin:end])).sum().backward()
        for what, got, want in [("out", out.detach(), want_out)] + [
                (f"d{i}", t.grad, g) for i, (t, g) in enumerate(zip(tensors, want_grads))]:
            want = want[:, begin:end]
            assert tuple(got.shape) == want.shape, (name, what, got.shape, want.shape)
            err = relative_error(got, want)
            assert err < TOL, f"rank {rank} {name} {what}: error {err:.3g} > {TOL}"


def check_ring(comm, lengths, begin, end):
    """Ring attention (softmax) through torch's autograd against the single-process linattn.torch
    softmax_attention on the whole sequence: the contiguous shards (causal and not) and, for causal, the
    balanced layout's two blocks per rank (balanced_range's cut of the same N)."""
    rank, ranks = comm.Get_rank(), comm.Get_size()
    B, H, D, E = 1, 2, 8, 4
    N = sum(lengths)
    g = torch.Generator().manual_seed(77)
    q, k, v, w = (torch.randn(B, N, H, d, generator=g) for d in (D, D, E, E))
    eb, el, lb, ll = dist.balanced_range(N, rank, ranks)
    rows = {"contiguous": torch.arange(begin, end), "balanced": torch.cat([torch.arange(eb, eb + el),
                                                                           torch.arange(lb, lb + ll)])}
    for causal, ring_layout in ((False, "contiguous"), (True, "contiguous"), (True, "balanced")):
        qf, kf, vf = (x.clone().requires_grad_() for x in (q, k, v))
        ref = lt.softmax_attention(qf, kf, vf, layout="bnhd", causal=causal)
        (ref * w).sum().backward()
        mine = rows[ring_layout]
        qs, ks, vs = (x[:, mine].clone().requires_grad_() for x in (q, k, v))
        out = dist.torch_ring_attention(comm, qs, ks, vs, layout="bnhd", causal=causal, ring_layout=ring_layout,
                                        early_length=el if ring_layout == "balanced" else -1)
        (out * w[:, mine]).sum().backward()
        for what, got, want in (("out", out.detach(), ref.detach()), ("dq", qs.grad, qf.grad),
                                ("dk", ks.grad, kf.grad), ("dv", vs.grad, vf.grad)):
            want = want[:, mine]
            assert tuple(got.shape) == tuple(want.shape), (ring_layout, what, got.shape, want.shape)
            err = relative_error(got, want)
            assert err < TOL, f"rank {rank} ring {ring_layout} causal={causal} {what}: error {err:.3g} > {TOL}"
    try:
        dist.ring_attention(comm, q[:, begin:end].numpy(), k[:, begin:end].numpy(), v[:, begin:end].numpy(),
                            layout="spiral")
    except ValueError as e:
        assert "layout" in str(e), str(e)
    else:
        raise AssertionError("an unknown ring layout was not refused")


if __name__ == "__main__":
    main()
