"""The pure-PyTorch baseline of issue 13: the gated delta rule (and KDA) in chunked matmul form (the
formulation of flash-linear-attention's naive chunk code: the chunk's updates folded into one
triangular solve, the WY/UT representation, then the inter-chunk state), written here from the
recurrence, with torch autograd for the backward.

    S_t = exp(g_t) S_{t-1},  S_t += beta_t k_t (v_t - S_t^T k_t)^T,   o_t = scale * S_t^T q_t

(KDA: exp(g_t) is diag(exp(g_t)), one log decay per key dim.) Tensors are [B, H, T, K] (each head's
rows one stretch, PyTorch's usual attention layout); beta [B, H, T]; g [B, H, T] or [B, H, T, K], log
decays <= 0. Per chunk of C tokens, with b the cumulative log decay inside the chunk (b_i = g_1 +
... + g_i), D_ij = exp(b_i - b_j) and S the state before the chunk, the written values
u_i = beta_i (v_i - (exp(b_i) S)^T k_i - sum_{j<i} D_ij (k_i . k_j) u_j) solve one unit lower
triangular system per chunk:

    (I + strict_lower(diag(beta) (K K^T * D))) [U~ | W] = [diag(beta) V | diag(beta) (K * exp(b))]
    U     = U~ - W S
    o     = (Q * exp(b)) S + lower(Q K^T * D) U
    S_new = exp(b_C) S + (K * exp(b_C - b))^T U

Everything but the scan is one batched operation over all chunks (the score matrices, the
triangular solve, torch.linalg.solve_triangular, and the output products); the scan over the T/C
chunks is a Python loop of two [B, H]-batched matmuls (W S and the state update). For KDA the decay
factors per key dim, D_ij = exp(b_i) exp(-b_j), so K K^T * D is (K * exp(b)) (K * exp(-b))^T:
exp(-b) stays finite for the log decays the report draws (b >= about -45 over 64 tokens). With
use_qk_l2norm q and k are first divided by sqrt(sum x^2 + 1e-6), as the operators do. T must be a
multiple of C.

`check()` holds each formulation to the token-by-token recurrence in float64, forward and gradients,
before the report times it.
"""
import torch

from torch_chunked_common import expect_matches_recurrence, log_decays


def l2norm(x):
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + 1e-6)


def _chunked(q, k, v, beta, b, per_key, scale, chunk):
    """The chunked form with b the in-chunk cumulative log decays, [B, H, n, C] (per head) or
    [B, H, n, C, K] (per key). Returns (o [B, H, T, V], final state [B, H, K, V])."""
    B, H, T, K = q.shape
    V = v.shape[-1]
    C, n = chunk, T // chunk
    q = q.reshape(B, H, n, C, K) * scale
    k = k.reshape(B, H, n, C, K)
    v = v.reshape(B, H, n, C, V)
    beta = beta.reshape(B, H, n, C, 1)
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    if per_key:
        eb, last = b.exp(), b[..., -1:, :]
        kr = k * (-b).exp()
        kk = (k * eb) @ kr.transpose(-1, -2)
        qk = (q * eb) @ kr.transpose(-1, -2)
        qe, ke = q * eb, k * eb
        kd = k * (last - b).exp()
        state_decay = last.exp().transpose(-1, -2)  # [B, H, n, K, 1]
    else:
        # exp(b_i - b_j) on the lower triangle; the upper masked to -inf before exp, so never overflows.
        D = (b.unsqueeze(-1) - b.unsqueeze(-2)).masked_fill(~lower, float('-inf')).exp()
        eb, last = b.exp().unsqueeze(-1), b[..., -1:]
        kk = (k @ k.transpose(-1, -2)) * D
        qk = (q @ k.transpose(-1, -2)) * D
        qe, ke = q * eb, k * eb
        kd = k * (last - b).exp().unsqueeze(-1)
        state_decay = last.exp().unsqueeze(-1)  # [B, H, n, 1, 1]
    L = (beta * kk).masked_fill(~strict, 0.0) + torch.eye(C, dtype=q.dtype, device=q.device)
    X = torch.linalg.solve_triangular(L, torch.cat([beta * v, beta * ke], dim=-1), upper=False, unitriangular=True)
    Ut, W = X[..., :V], X[..., V:]
    qk = qk.masked_fill(~lower, 0.0)
    # The scan over chunks: unbind, not indexing, so that the backward stacks the gradients once
    # (torch_chunked_decay.py measured the difference).
    S = q.new_zeros(B, H, K, V)
    before, written = [], []
    for Ut_i, W_i, kd_i, decay_i in zip(Ut.unbind(2), W.unbind(2), kd.unbind(2), state_decay.unbind(2)):
        U_i = Ut_i - W_i @ S
        before.append(S)
        written.append(U_i)
        S = decay_i * S + kd_i.transpose(-1, -2) @ U_i
    U = torch.stack(written, dim=2)
    o = qe @ torch.stack(before, dim=2) + qk @ U
    return o.reshape(B, H, T, V), S


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, chunk=64, use_qk_l2norm=False):
    """Gated DeltaNet (one log decay per head and token; g None: DeltaNet), chunked.
    Returns (o [B, H, T, V], final state)."""
    B, H, T, K = q.shape
    assert T % chunk == 0, f'T = {T} is not a multiple of the chunk {chunk}'
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    scale = K ** -0.5 if scale is None else scale
    n = T // chunk
    b = (q.new_zeros(B, H, n, chunk) if g is None else g.reshape(B, H, n, chunk).cumsum(-1))
    return _chunked(q, k, v, beta, b, False, scale, chunk)


def chunk_kda(q, k, v, g, beta, scale=None, chunk=64, use_qk_l2norm=False):
    """Kimi Delta Attention (one log decay per head, token and key dim), chunked."""
    B, H, T, K = q.shape
    assert T % chunk == 0, f'T = {T} is not a multiple of the chunk {chunk}'
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    scale = K ** -0.5 if scale is None else scale
    b = g.reshape(B, H, T // chunk, chunk, K).cumsum(-2)
    return _chunked(q, k, v, beta, b, True, scale, chunk)


def recurrent(q, k, v, g, beta, scale=None, use_qk_l2norm=False):
    """The recurrence token by token (the check's reference): g None, [B, H, T] or [B, H, T, K]."""
    B, H, T, K = q.shape
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    scale = K ** -0.5 if scale is None else scale
    S = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        if g is not None:
            S = S * (g[:, :, t].exp().unsqueeze(-1) if g.dim() == 4 else g[:, :, t].exp()[..., None, None])
        kt = k[:, :, t]
        u = beta[:, :, t, None] * (v[:, :, t] - (kt.unsqueeze(-2) @ S).squeeze(-2))
        S = S + kt.unsqueeze(-1) * u.unsqueeze(-2)
        out.append(scale * (q[:, :, t].unsqueeze(-2) @ S).squeeze(-2))
    return torch.stack(out, dim=2), S


def betas(*shape, dtype=torch.float32):
    """sigmoid(N(0, 1)), as the operator table draws β."""
    return torch.randn(*shape, dtype=dtype).sigmoid()


FORMULATIONS = {'gated_delta_rule': chunk_gated_delta_rule, 'kda': chunk_kda}


def check(chunks=(32, 64, 128), tolerance=1e-10):
    """Each formulation at each chunk size against the recurrence, float64, with and without the
    l2norm: o, the final state and the gradients of q, k, v, g, beta. Raises SystemExit naming the
    first that differs."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(13)
    B, H, T, K, V = 2, 2, 256, 8, 4
    for name, fn in FORMULATIONS.items():
        for l2 in (False, True):
            q, k, v = (torch.rand(B, H, T, D, dtype=torch.float64) * 2 - 1 for D in (K, K, V))
            if not l2:
                k = k / K ** 0.5  # keys of norm about 1 keep the recurrence a contraction
            g = log_decays(*((B, H, T) if name == 'gated_delta_rule' else (B, H, T, K)), dtype=torch.float64)
            beta = betas(B, H, T, dtype=torch.float64)
            dout = torch.randn(B, H, T, V, dtype=torch.float64)
            expect_matches_recurrence(name + ' (chunk {C}, l2norm ' + str(l2) + ')', fn, recurrent, (q, k, v, g, beta),
                                      ['q', 'k', 'v', 'g', 'beta'], dout, chunks, tolerance, use_qk_l2norm=l2)
    torch.random.set_rng_state(generator_state)


if __name__ == '__main__':
    check()
    print('torch chunked gated_delta_rule and kda match the recurrence (float64, chunks 32, 64, 128, with and '
          'without l2norm)')
