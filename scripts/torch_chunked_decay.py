"""The pure-PyTorch baseline of issue 12: simple GLA and GLA in chunked matmul form (the formulation
of flash-linear-attention's naive chunk code: intra-chunk masked products with the decay matrix,
inter-chunk states), written here from the recurrence, with torch autograd for the backward.

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,   o_t = scale * S_t^T q_t

Tensors are [B, H, T, K] (each head's rows one stretch, PyTorch's usual attention layout); g is
[B, H, T] (simple GLA) or [B, H, T, K] (GLA), log decays <= 0. Per chunk of C tokens, with b the
cumulative log decay inside the chunk (b_i = g_1 + ... + g_i) and S the state before the chunk:

    o_i   = sum_{j <= i} (q_i . k_j) exp(b_i - b_j) v_j   +   (q_i * exp(b_i))^T S
    S_new = diag(exp(b_C)) S + (K * exp(b_C - b))^T V

Every chunk's intra-chunk product and its chunk-local state (K * exp(b_C - b))^T V are one batched
matmul over all chunks; only the scan S_i = exp(b_C) S_{i-1} + U_i over the T/C chunks is a Python
loop (elementwise, [B, H, K, V] per step). For GLA the decay matrix factors, exp(b_i - b_j) =
exp(b_i) exp(-b_j) per key dim, so the intra product is (Q * exp(b)) (K * exp(-b))^T: exp(-b) stays
finite for the log decays the report draws (b >= about -45 over 64 tokens). T must be a multiple of C.

`check()` holds each formulation to the token-by-token recurrence in float64, forward and gradients,
before the report times it.
"""
import torch

from torch_chunked_common import expect_matches_recurrence, log_decays


def _scan(U, decay):
    """States before each chunk: S_0 = 0, S_i = decay_{i-1} * S_{i-1} + U_{i-1}; U [B, H, n, K, V],
    decay [B, H, n, K, 1] (or [B, H, n, 1, 1]). Returns ([B, H, n, K, V], the final state)."""
    # unbind, not U[:, :, i]: the backward of each index would zero-fill a gradient of U's whole size
    # (T/C times over; measured 60 s of the 62 s fwd+bwd at T = 16384), unbind's stacks them once.
    S = U.new_zeros(U.shape[:2] + U.shape[3:])
    before = []
    for U_i, decay_i in zip(U.unbind(2), decay.unbind(2)):
        before.append(S)
        S = S * decay_i + U_i
    return torch.stack(before, dim=2), S


def _chunks(q, k, v, scale, C):
    """q (times the scale, default K^-1/2), k and v as [B, H, n, C, ·], n = T / C chunks of C tokens;
    returns (B, H, T, K, V, n, C, q, k, v)."""
    B, H, T, K = q.shape
    V = v.shape[-1]
    assert T % C == 0, f'T = {T} is not a multiple of the chunk {C}'
    n = T // C
    scale = K ** -0.5 if scale is None else scale
    return B, H, T, K, V, n, C, q.reshape(B, H, n, C, K) * scale, k.reshape(B, H, n, C, K), v.reshape(B, H, n, C, V)


def chunk_simple_gla(q, k, v, g, scale=None, chunk=64):
    """Simple GLA (one log decay per head and token), chunked. Returns (o [B, H, T, V], final state)."""
    B, H, T, K, V, n, C, q, k, v = _chunks(q, k, v, scale, chunk)
    b = g.reshape(B, H, n, C).cumsum(-1)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    # exp(b_i - b_j) on the lower triangle; the upper masked to -inf before exp, so never overflows.
    decay = (b.unsqueeze(-1) - b.unsqueeze(-2)).masked_fill(~causal, float('-inf')).exp()
    o = ((q @ k.transpose(-1, -2)) * decay) @ v
    last = b[..., -1:]
    U = (k * (last - b).exp().unsqueeze(-1)).transpose(-1, -2) @ v
    before, final = _scan(U, last.exp().unsqueeze(-1))
    o = o + (q * b.exp().unsqueeze(-1)) @ before
    return o.reshape(B, H, T, V), final


def chunk_gla(q, k, v, g, scale=None, chunk=64):
    """GLA (one log decay per head, token and key dim), chunked. Returns (o [B, H, T, V], final state)."""
    B, H, T, K, V, n, C, q, k, v = _chunks(q, k, v, scale, chunk)
    b = g.reshape(B, H, n, C, K).cumsum(-2)
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    qb = q * b.exp()
    A = (qb @ (k * (-b).exp()).transpose(-1, -2)).masked_fill(~causal, 0.0)
    o = A @ v
    last = b[..., -1:, :]
    U = (k * (last - b).exp()).transpose(-1, -2) @ v
    before, final = _scan(U, last.exp().transpose(-1, -2))
    o = o + qb @ before
    return o.reshape(B, H, T, V), final


def recurrent(q, k, v, g, scale=None):
    """The recurrence token by token (the check's reference): g [B, H, T] or [B, H, T, K]."""
    B, H, T, K = q.shape
    scale = K ** -0.5 if scale is None else scale
    gk = g.unsqueeze(-1).expand(B, H, T, K) if g.dim() == 3 else g
    S = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        S = S * gk[:, :, t].exp().unsqueeze(-1) + k[:, :, t].unsqueeze(-1) * v[:, :, t].unsqueeze(-2)
        out.append(scale * (q[:, :, t].unsqueeze(-2) @ S).squeeze(-2))
    return torch.stack(out, dim=2), S


FORMULATIONS = {'simple_gla': chunk_simple_gla, 'gla': chunk_gla}


def check(chunks=(32, 64, 128), tolerance=1e-10):
    """Each formulation at each chunk size against the recurrence, float64: o, the final state and
    the gradients of q, k, v, g. Raises SystemExit naming the first that differs."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(12)
    B, H, T, K, V = 2, 2, 256, 8, 4
    for name, fn in FORMULATIONS.items():
        q, k, v = (torch.rand(B, H, T, D, dtype=torch.float64) * 2 - 1 for D in (K, K, V))
        g = log_decays(*((B, H, T) if name == 'simple_gla' else (B, H, T, K)), dtype=torch.float64)
        dout = torch.randn(B, H, T, V, dtype=torch.float64)
        expect_matches_recurrence(name + ' (chunk {C})', fn, recurrent, (q, k, v, g), 'qkvg', dout, chunks, tolerance)
    torch.random.set_rng_state(generator_state)


if __name__ == '__main__':
    check()
    print('torch chunked simple_gla and gla match the recurrence (float64, chunks 32, 64, 128)')
