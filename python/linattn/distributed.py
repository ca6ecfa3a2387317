"""linattn.distributed: one sequence split over the ranks of an MPI communicator (docs/distributed.md).

Rank r of `comm` (an mpi4py communicator, e.g. MPI.COMM_WORLD) holds a contiguous shard of the
sequence — rank order is sequence order — and calls the same function with its own shard: q, k
[B, n_r, H, D], v [B, n_r, H, E] (n_r may differ between ranks, and may be 0). It gets back its own
rows of the result; the ranks exchange only the K×V states (an exclusive scan of ceil(log2 P)
rounds of MPI_Sendrecv when causal, one MPI_Allreduce when not), never tokens. Results are the same
on every run for a given split, and equal to the single-process operator (linattn.linear_attention,
decayed_attention, delta_rule) on the whole sequence within fp32 rounding.

numpy (float32 arrays, any strides; the options of linattn.linear_attention, without key_lengths):

- linear_attention(comm, q, k, v, *, feature_map="elu", causal=False, eps=1e-6, n_features=None, seed=0)
- linear_attention_backward(comm, q, k, v, dout, *, same options) -> (dq, dk, dv)
- decayed_attention(comm, q, k, v, g=None, *, decay, g_gamma=None, scale=None, chunk_size=64) and
  decayed_attention_backward(comm, q, k, v, g, dout, ...) -> (dq, dk, dv, dg): linattn.decayed_attention
- delta_rule(comm, q, k, v, beta, g=None, *, gate="delta_rule", scale=None, use_qk_l2norm=False,
  chunk_size=64) and delta_rule_backward(comm, q, k, v, beta, g, dout, ...) -> (dq, dk, dv, dbeta, dg)
- ring_attention(comm, q, k, v, *, scale=None, causal=False, layout="contiguous", early_length=-1,
  key_lengths=None) -> (out, lse) and ring_attention_backward(comm, q, k, v, out, lse, dout, ...) ->
  (dq, dk, dv): exact softmax attention (hybrid models' softmax layers) by ring attention: the k/v
  shards travel around the ring, so its traffic grows with N (docs/ring-attention.md). layout
  "balanced" (for causal): rank r holds blocks r and 2P−1−r of 2P; balanced_range(N, rank, ranks) ->
  (early_begin, early_length, late_begin, late_length) gives the standard cut
- comm_stats() -> {"bytes_sent", "calls", "comm_seconds", "compute_seconds"}; reset_comm_stats()

torch (autograd; float32 CPU tensors; layout "bnhd" [B, n, H, D] or "bhnd" [B, H, n, D], as linattn.torch):

- torch_linear_attention(comm, q, k, v, *, layout, feature_map="elu", causal=False, eps=1e-6, ...)
- torch_decayed_attention(comm, q, k, v, g=None, *, decay, ...), torch_delta_rule(comm, q, k, v, beta,
  g=None, *, gate, ...): [B, n_r, H, K] tensors (flash-linear-attention's layout)
- torch_ring_attention(comm, q, k, v, *, layout="bnhd", scale=None, causal=False, ring_layout="contiguous",
  early_length=-1, key_lengths=None): ring attention's out with autograd

Every rank must make the same call: shapes that disagree between ranks, or a bad argument on one rank,
raise ValueError on every rank naming the rank at fault, before any arithmetic. Needs linattn built
with LINATTN_MPI (the _distributed module) and mpi4py built against the same MPI (Debian:
python3-mpi4py with libopenmpi-dev).
"""

import contextlib
import functools

try:
    from . import _distributed
except ImportError as e:  # linattn built without LINATTN_MPI, or MPI's library missing
    raise ImportError(f"linattn.distributed needs linattn built with LINATTN_MPI=ON (the _distributed module): {e}"
                      ) from e

__all__ = ["linear_attention", "linear_attention_backward", "decayed_attention", "decayed_attention_backward",
           "delta_rule", "delta_rule_backward", "torch_linear_attention", "torch_decayed_attention",
           "torch_delta_rule", "ring_attention", "ring_attention_backward", "balanced_range", "causal_shard_lengths",
           "torch_ring_attention", "comm_stats", "reset_comm_stats"]


def _handle(comm):
    """The communicator's Fortran handle, the form _distributed takes (MPI_Comm_f2c)."""
    py2f = getattr(comm, "py2f", None)
    if py2f is None:
        raise TypeError(f"comm: expected an mpi4py communicator (with py2f()), got {type(comm).__name__}")
    return int(py2f())


@contextlib.contextmanager
def _local(comm, operation):
    """This rank's own conversion of its arguments before the collective `operation` (the C++ name,
    e.g. "decayed_attention_forward"): a failure there joins the operation's agreement as this rank's
    failed checks, so that every rank raises ValueError naming this one; raised here alone it would
    leave the other ranks waiting in their agreement (docs/distributed.md)."""
    try:
        yield
    except Exception as e:
        _distributed.fail_collective(_handle(comm), operation, f"{type(e).__name__}: {e}")


def linear_attention(comm, q, k, v, *, feature_map="elu", causal=False, eps=1e-6, n_features=None, seed=0):
    """This rank's out [B, n_r, H, E]: linattn.linear_attention over the whole sharded sequence."""
    return _distributed.linear_attention(_handle(comm), q, k, v, feature_map=feature_map, causal=causal, eps=eps,
                                         n_features=n_features, seed=seed)


def linear_attention_backward(comm, q, k, v, dout, *, feature_map="elu", causal=False, eps=1e-6, n_features=None,
                              seed=0):
    """This rank's (dq, dk, dv) for its dout [B, n_r, H, E]; the other ranks' gradients reach it through
    the reverse scan, so every rank must call it."""
    return _distributed.linear_attention_backward(_handle(comm), q, k, v, dout, feature_map=feature_map,
                                                  causal=causal, eps=eps, n_features=n_features, seed=seed)


def comm_stats():
    """This process's traffic and time inside linattn_mpi since the last reset (comm.hpp's CommStats)."""
    return _distributed.comm_stats()


def reset_comm_stats():
    _distributed.reset_comm_stats()


def decayed_attention(comm, q, k, v, g=None, *, decay, g_gamma=None, scale=None, chunk_size=64):
    """This rank's o [B, n_r, H, V]: linattn.decayed_attention over the whole sharded sequence, which
    starts from the zero state on rank 0 (q, k [B, n_r, H, K], g [B, n_r, H] or [B, n_r, H, 1] for
    simple_gla, [B, n_r, H, K] for gla, None for linear, retention and lightning's g_gamma [H])."""
    return _distributed.decayed_attention(_handle(comm), q, k, v, g, decay=decay, g_gamma=g_gamma, scale=scale,
                                          chunk_size=chunk_size)


def decayed_attention_backward(comm, q, k, v, g, dout, *, decay, g_gamma=None, scale=None, chunk_size=64):
    """This rank's (dq, dk, dv, dg) (dg None without g)."""
    return _distributed.decayed_attention_backward(_handle(comm), q, k, v, g, dout, decay=decay, g_gamma=g_gamma,
                                                   scale=scale, chunk_size=chunk_size)


def delta_rule(comm, q, k, v, beta, g=None, *, gate="delta_rule", scale=None, use_qk_l2norm=False, chunk_size=64):
    """This rank's o [B, n_r, H, V]: linattn.delta_rule over the whole sharded sequence (beta
    [B, n_r, H]; g [B, n_r, H] for gated_delta_rule, [B, n_r, H, K] for kda, None for delta_rule)."""
    return _distributed.delta_rule(_handle(comm), q, k, v, beta, g, gate=gate, scale=scale,
                                   use_qk_l2norm=use_qk_l2norm, chunk_size=chunk_size)


def delta_rule_backward(comm, q, k, v, beta, g, dout, *, gate="delta_rule", scale=None, use_qk_l2norm=False,
                        chunk_size=64):
    """This rank's (dq, dk, dv, dbeta, dg) (dg None without g)."""
    return _distributed.delta_rule_backward(_handle(comm), q, k, v, beta, g, dout, gate=gate, scale=scale,
                                            use_qk_l2norm=use_qk_l2norm, chunk_size=chunk_size)


def ring_attention(comm, q, k, v, *, scale=None, causal=False, layout="contiguous", early_length=-1,
                   key_lengths=None):
    """This rank's (out [B, n_r, H, E], lse [B, H, n_r]) of softmax attention over the whole sharded
    sequence (linattn.softmax_attention's, with key_lengths over global positions); lse is what the
    backward takes."""
    return _distributed.ring_attention(_handle(comm), q, k, v, scale=scale, causal=causal, layout=layout,
                                       early_length=early_length, key_lengths=key_lengths)


def ring_attention_backward(comm, q, k, v, out, lse, dout, *, scale=None, causal=False, layout="contiguous",
                            early_length=-1, key_lengths=None):
    """This rank's (dq, dk, dv) of ring_attention, from its out and lse."""
    return _distributed.ring_attention_backward(_handle(comm), q, k, v, out, lse, dout, scale=scale,
                                                causal=causal, layout=layout, early_length=early_length,
                                                key_lengths=key_lengths)


def balanced_range(N, rank, ranks):
    """(early_begin, early_length, late_begin, late_length): the rows of a length-N sequence that rank holds
    under the balanced layout (blocks rank and 2·ranks−1−rank of 2·ranks)."""
    return _distributed.balanced_range(int(N), int(rank), int(ranks))


def causal_shard_lengths(N, ranks, sums_per_pass=None, finish_per_pass=None):
    """Shard lengths (a list of ranks ints adding up to N) that even out the ranks' time in the causal
    linear forward: ranks 0 … P−2 form their shard's sums before their pass, the last rank does not and
    takes more tokens (docs/distributed.md). sums_per_pass, finish_per_pass: the sums' and the finishing
    pass's time against a causal pass's (None: the library's 0.35 and 0.55)."""
    given = {"sums_per_pass": sums_per_pass, "finish_per_pass": finish_per_pass}
    ratios = {name: float(x) for name, x in given.items() if x is not None}
    return list(_distributed.causal_shard_lengths(int(N), int(ranks), **ratios))


@functools.cache
def _ring():
    """ring_attention as a torch.autograd.Function (made on first use, like _function)."""
    import torch
    from torch.autograd.function import once_differentiable

    class Ring(torch.autograd.Function):
        @staticmethod
        def forward(ctx, comm, options, q, k, v):
            with _local(comm, "ring_attention_forward"):
                arrays = [_array(x) for x in (q, k, v)]
            out, lse = ring_attention(comm, *arrays, **options)
            out, lse = torch.from_numpy(out), torch.from_numpy(lse)
            ctx.comm, ctx.options = comm, options
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.mark_non_differentiable(lse)
            return out

        @staticmethod
        @once_differentiable
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            with _local(ctx.comm, "ring_attention_backward"):
                arrays = [_array(x) for x in (q, k, v, out, lse, dout.to(torch.float32).contiguous())]
            grads = ring_attention_backward(ctx.comm, *arrays, **ctx.options)
            return (None, None, *(torch.from_numpy(g) for g in grads))

    return Ring


_FORWARD = {"linear": linear_attention, "decayed": decayed_attention, "delta": delta_rule}
_BACKWARD = {"linear": linear_attention_backward, "decayed": decayed_attention_backward,
             "delta": delta_rule_backward}
# The C++ operations' names, for _local's agreement: the family's forward and backward.
_OPERATIONS = {"linear": ("linear_attention_forward", "linear_attention_backward"),
               "decayed": ("decayed_attention_forward", "decayed_attention_backward"),
               "delta": ("delta_rule_forward", "delta_rule_backward")}


@functools.cache
def _function():
    """The torch.autograd.Function, made on first use so that importing this module needs no torch."""
    import torch
    from torch.autograd.function import once_differentiable

    class Distributed(torch.autograd.Function):
        """out = _FORWARD[family](comm, *tensors, **options) (None for an absent g), whose backward is
        the distributed backward: a collective, so every rank's loss.backward() must reach it (as
        with torch.distributed)."""

        @staticmethod
        def forward(ctx, comm, family, options, *tensors):
            ctx.comm, ctx.family, ctx.options = comm, family, options
            ctx.absent = [x is None for x in tensors]
            ctx.save_for_backward(*(x for x in tensors if x is not None))
            with _local(comm, _OPERATIONS[family][0]):
                arrays = [None if x is None else _array(x) for x in tensors]
            return torch.from_numpy(_FORWARD[family](comm, *arrays, **options))

        @staticmethod
        @once_differentiable
        def backward(ctx, dout):
            saved = iter(ctx.saved_tensors)
            with _local(ctx.comm, _OPERATIONS[ctx.family][1]):
                arrays = [None if absent else _array(next(saved)) for absent in ctx.absent]
                arrays.append(_array(dout.to(torch.float32).contiguous()))
            grads = _BACKWARD[ctx.family](ctx.comm, *arrays, **ctx.options)
            return (None, None, None, *(None if g is None else torch.from_numpy(g) for g in grads))

    return Distributed


def _array(x):
    """A float32 CPU tensor's memory as a numpy array (no copy, any strides)."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu" or x.dtype != torch.float32:
        raise TypeError(f"expected a float32 CPU tensor, got {x.dtype} on {x.device}")
    return x.detach().resolve_conj().resolve_neg().numpy()


def torch_linear_attention(comm, q, k, v, *, layout=None, feature_map="elu", causal=False, eps=1e-6,
                           n_features=None, seed=0):
    """linattn.torch.linear_attention over the shards of comm, with autograd: this rank's rows of the
    output, in `layout` ("bnhd": [B, n_r, H, D] -> [B, n_r, H, E]; "bhnd": torch's [B, H, n_r, D])."""
    from ._layout import check_layout, from_bnhd, to_bnhd

    with _local(comm, "linear_attention_forward"):
        check_layout(layout, "torch_linear_attention")
        q, k, v = (to_bnhd(x, layout) for x in (q, k, v))
    options = dict(feature_map=feature_map, causal=causal, eps=eps, n_features=n_features, seed=seed)
    return from_bnhd(_function().apply(comm, "linear", options, q, k, v), layout)


def torch_decayed_attention(comm, q, k, v, g=None, *, decay, g_gamma=None, scale=None, chunk_size=64):
    """decayed_attention with autograd (dq, dk, dv, dg) on [B, n_r, H, K] tensors (flash-linear-
    attention's layout, as linattn.fla)."""
    options = dict(decay=decay, g_gamma=g_gamma, scale=scale, chunk_size=chunk_size)
    return _function().apply(comm, "decayed", options, q, k, v, g)


def torch_delta_rule(comm, q, k, v, beta, g=None, *, gate="delta_rule", scale=None, use_qk_l2norm=False,
                     chunk_size=64):
    """delta_rule with autograd (dq, dk, dv, dbeta, dg) on [B, n_r, H, K] tensors."""
    options = dict(gate=gate, scale=scale, use_qk_l2norm=use_qk_l2norm, chunk_size=chunk_size)
    return _function().apply(comm, "delta", options, q, k, v, beta, g)


def torch_ring_attention(comm, q, k, v, *, layout=None, scale=None, causal=False, ring_layout="contiguous",
                         early_length=-1, key_lengths=None):
    """ring_attention's out with autograd (dq, dk, dv), in `layout` ("bnhd" or torch's "bhnd", as
    linattn.torch); ring_layout is the shards' placement ("contiguous" or "balanced")."""
    from ._layout import check_layout, from_bnhd, to_bnhd

    with _local(comm, "ring_attention_forward"):
        check_layout(layout, "torch_ring_attention")
        q, k, v = (to_bnhd(x, layout) for x in (q, k, v))
    options = dict(scale=scale, causal=causal, layout=ring_layout, early_length=early_length, key_lengths=key_lengths)
    return from_bnhd(_ring().apply(comm, options, q, k, v), layout)
