"""flash-linear-attention's rotary_embedding (fla.modules.rotary: what its RotaryEmbedding module calls with
its cos/sin tables) in torch, for linattn.integrations.fla to put in place of fla's Triton kernel on CPU
tensors. Same parameters, same semantics."""

import torch

from .._retention_layer import positions

__all__ = ["fla_rotary_embedding"]


def fla_rotary_embedding(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                         chunk_indices=None):
    """x [B, T, H, D] turned by the tables cos, sin [TR, R/2] (R ≤ D rotary channels; the others pass
    through): token t of a sequence sits at position t + seqlen_offsets (an int, or one per sequence [N]),
    the sequences being the batch rows or, with cu_seqlens (B = 1), the packed ones. Channel i < R/2 pairs
    with i + R/2 (interleaved: channel 2i with 2i + 1) and both turn by the table's angle, in float32. A
    position outside the table (negative: a padding offset larger than the cache's count) turns to zeros,
    as linattn.layers' RotaryEmbedding gives them (fla's kernel leaves them unwritten)."""
    if cos.shape != sin.shape or cos.dim() != 2:
        raise ValueError(f"cos, sin: expected tables of one shape [TR, R / 2], got {list(cos.shape)} and "
                         f"{list(sin.shape)}")
    R = 2 * cos.shape[1]
    if x.dim() != 4 or R > x.shape[-1]:
        raise ValueError(f"x: expected [B, T, H, D] with D ≥ the rotary dimension {R}, got {list(x.shape)}")
    where = positions(x, seqlen_offsets, cu_seqlens).to(torch.long)  # [B or 1, T]
    inside = (where >= 0) & (where < cos.shape[0])
    index = where.clamp(0, cos.shape[0] - 1)
    c, s = (table.to(torch.float32)[index].unsqueeze(2) for table in (cos, sin))  # [B or 1, T, 1, R / 2]
    rotary = x[..., :R].to(torch.float32)
    x0, x1 = (rotary[..., 0::2], rotary[..., 1::2]) if interleaved else rotary.chunk(2, dim=-1)
    y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
    turned = torch.stack([y0, y1], dim=-1).flatten(-2) if interleaved else torch.cat([y0, y1], dim=-1)
    turned = (turned * inside[:, :, None, None]).to(x.dtype)
    out = torch.cat([turned, x[..., R:]], dim=-1) if R < x.shape[-1] else turned
    if inplace:
        x.copy_(out)
        return x
    return out
