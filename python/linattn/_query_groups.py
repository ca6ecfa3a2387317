"""Query heads a multiple R of the key/value heads (ONNX LinearAttention's and torch's grouped-query
attention), for every Python entry point of linattn that takes q, k, v: linattn.fla's decayed, delta-rule
and DPLR functions, linattn.torch's softmax and linear attention."""

import functools

import torch


def query_groups(q, k, v):
    """R, the query heads per key/value head: q [B, T, R·H, K] over k [B, T, H, K] and v [B, T, H, V]
    (ONNX LinearAttention's grouped-query attention, opset 27); 1 where q and k have the same heads, or
    where the arguments are not such tensors (the entry point's own checks then name what is wrong)."""
    if not all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in (q, k, v)):
        return 1
    HQ, H = q.shape[2], k.shape[2]
    if HQ == H or H == 0 or HQ % H != 0:
        return 1
    if v.shape[2] != H:
        raise ValueError(f"v: with q's {HQ} heads grouped over k's {H} (query groups), expected k's {H} heads, "
                         f"got {v.shape[2]} (shape {list(v.shape)}); query groups and grouped value heads "
                         "together are not supported")
    return HQ // H


def by_query_groups(entry, q_at=3, native=None):
    """Query heads a multiple R of the key/value heads for an entry point whose arguments q, k, v stand at
    q_at (the decayed and delta ones: op, mode, kind, q, k, v, ...; the DPLR one and linattn.torch's
    [B, N, H, D] softmax and linear attention: q, k, v, ...). An entry given output_final_state by keyword
    returns (o, final_state), the others o alone. Query head i reads key/value head i // R and its state; o
    [B, T, R·H, V], the gates, beta and the states have the H key/value heads. The states do not involve
    q, so the call is R calls over the same k, v and gates, the r-th with query heads r, R + r, 2R + r, ...
    (a strided view of q, no copy), the outputs interleaved back into q's head order; the final state is the
    first call's, and autograd sums the R calls' gradients to k, v, the gates and the initial state. Each
    call runs the state pass again: R times the state work of a native shared pass (docs/decisions.md).
    native(args, options), where given, says when the entry takes the grouped q itself (linattn's operators
    then read the R query heads against one state pass): the entry is called once, unsliced."""

    @functools.wraps(entry)
    def run(*args, **options):
        q, k, v = args[q_at:q_at + 3]
        R = query_groups(q, k, v)
        if R == 1 or (native is not None and native(args, options)):
            return entry(*args, **options)
        stateful = "output_final_state" in options
        want_state = options.pop("output_final_state", False)
        results = []
        for r in range(R):
            sliced = args[:q_at] + (q[:, :, r::R],) + args[q_at + 1:]
            state_option = {"output_final_state": want_state and r == 0} if stateful else {}
            results.append(entry(*sliced, **state_option, **options))
        if not stateful:
            return torch.stack(results, 3).flatten(2, 3)
        return torch.stack([o for o, _ in results], 3).flatten(2, 3), results[0][1]

    return run
