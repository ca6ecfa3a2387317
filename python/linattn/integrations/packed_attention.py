"""Full (softmax) attention over packed sequences, as transformers' attention functions are called:
query [1, Hq, Tq, D], key [1, Hk, Tk, D], value [1, Hk, Tk, E] (Hq a multiple of Hk: grouped-query
attention), the sequences' token offsets cu_q [N + 1] and cu_k [N + 1]; returns [1, Tq, Hq, E]
(transformers' attention functions' layout). Each sequence's queries see its own keys only, causally
aligned to its keys' end (a query at i sees keys up to i + keys − queries: the last query the last key).

linattn's softmax with cu_seqlens (its flash-style kernel, with its C++ backward) runs when its packing
says everything the call asks for: the same offsets for queries and keys, float32/bfloat16/float16, no
dropout, no sliding window, and a model mask that is either absent or exactly the packed (block-diagonal,
causal where the layer is) mask. Otherwise (a cache of other lengths, a sparse top-k mask, a window,
dropout) each sequence runs through torch's scaled_dot_product_attention within the model's own mask.
"""

import torch

_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def offsets_of(seq_idx):
    """cu_seqlens [N + 1] of one row's sequence indices seq_idx [1, T] (causal-conv1d's packing format)."""
    ids = torch.as_tensor(seq_idx).reshape(-1)
    starts = torch.nonzero(ids[1:] != ids[:-1]).reshape(-1) + 1
    return torch.cat([starts.new_zeros(1), starts, starts.new_full((1,), ids.numel())])


def _packed_mask(cu, causal):
    """The [T, T] bool mask of sequences packed at offsets cu: token i sees token j of its own sequence
    (j ≤ i when causal)."""
    T = int(cu[-1])
    sequence = torch.bucketize(torch.arange(T), cu[1:].to(torch.long), right=True)
    allowed = sequence.unsqueeze(1) == sequence.unsqueeze(0)
    return allowed.tril_() if causal else allowed


def _kernel_applies(query, key, attention_mask, cu_q, cu_k, dropout, causal, window):
    same_packing = cu_q is cu_k or torch.equal(torch.as_tensor(cu_q).long(), torch.as_tensor(cu_k).long())
    if not (same_packing and query.dtype in _KERNEL_DTYPES and dropout == 0.0 and window is None
            and query.shape[2] == key.shape[2]):
        return False
    if attention_mask is None:
        return True
    # The model's mask adds nothing to the packing only if it is the packed mask itself (transformers builds
    # exactly that from the restarting position_ids); anything else (a top-k mask) goes the per-sequence way.
    return (attention_mask.dtype == torch.bool and attention_mask.shape[:2] == (1, 1)
            and torch.equal(attention_mask[0, 0], _packed_mask(torch.as_tensor(cu_q).long(), causal)))


def _per_sequence(query, key, value, attention_mask, cu_q, cu_k, dropout, scaling, causal, window):
    groups = query.shape[1] // key.shape[1]
    outs = []
    for n in range(len(cu_q) - 1):
        qa, qb, ka, kb = int(cu_q[n]), int(cu_q[n + 1]), int(cu_k[n]), int(cu_k[n + 1])
        q = query[:, :, qa:qb]
        if qb == qa:
            outs.append(query.new_zeros(1, query.shape[1], 0, value.shape[-1]))
            continue
        k = key[:, :, ka:kb].repeat_interleave(groups, dim=1)
        v = value[:, :, ka:kb].repeat_interleave(groups, dim=1)
        pos_q = torch.arange(qb - qa).unsqueeze(1) + (kb - ka) - (qb - qa)
        pos_k = torch.arange(kb - ka).unsqueeze(0)
        allowed = torch.ones(qb - qa, kb - ka, dtype=torch.bool)
        if causal:
            allowed &= pos_k <= pos_q
        if window is not None:
            allowed &= pos_k > pos_q - window
        mask = allowed
        if attention_mask is not None:  # the model's own mask (e.g. a sparse top-k one) still applies inside
            block = attention_mask[:, :, qa:qb, ka:kb]
            mask = allowed & block if block.dtype == torch.bool else block.masked_fill(~allowed, float("-inf"))
        outs.append(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                                     scale=scaling))
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous()


def _kernel(query, key, value, cu, scaling, causal):
    from .. import torch as linattn_torch
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # linattn's softmax has one key head per query head
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    cu = torch.as_tensor(cu).to(torch.int64)
    out = linattn_torch.softmax_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                          layout="bnhd", causal=causal, scale=scaling, cu_seqlens=cu)
    return out.contiguous()


def packed_attention(query, key, value, attention_mask, cu_q, cu_k, dropout=0.0, scaling=None, causal=True,
                     window=None):
    """Attention of packed sequences (see the module's docstring): [1, Tq, Hq, E]."""
    if _kernel_applies(query, key, attention_mask, cu_q, cu_k, dropout, causal, window):
        return _kernel(query, key, value, cu_q, scaling, causal)
    return _per_sequence(query, key, value, attention_mask, cu_q, cu_k, dropout, scaling, causal, window)
