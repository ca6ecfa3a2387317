"""Helpers shared by the Python tests (imported by name; conftest.py only holds fixtures, since
tools/tests has a conftest of its own): the seed's PyTorch code, torch's own attention math, test
arrays in 3 layouts, and the error measure."""

import pathlib

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
# The project's seed note lives in shared/, a sibling of the repository (as in CI) or of its checkout.
SEED_NOTE = REPO.parent / "shared" / "seed" / "linear-attention-notes.md"


def load_seed():
    """The seed's `standard_attention` and `linear_attention` (elu_feature_map), run as written.

    The code is taken verbatim from the note's PyTorch section; only the note's prose headings
    (lines starting with ✅) between the functions are dropped.
    """
    text = SEED_NOTE.read_text(encoding="utf-8")
    lines = text.splitlines()
    start = lines.index("import torch")
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "return output")
    code = "\n".join(line for line in lines[start : end + 1] if not line.startswith("✅"))
    namespace = {}
    exec(compile(code, str(SEED_NOTE), "exec"), namespace)
    return namespace


def seed_softmax(seed, q, k, v):
    """The seed's standard_attention on [B, N, H, D] tensors: it attends over the second-last axis,
    so heads move in front of the sequence and back."""
    out = seed["standard_attention"](q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


def seed_linear(seed, q, k, v):
    """The seed's linear_attention on [B, N, H, D] tensors. Its einsums are over [n, l, d] with n the
    sequence (summed) and l an independent index: here l runs over B·H."""

    def nld(x):
        B, N, H, D = x.shape
        return x.permute(1, 0, 2, 3).reshape(N, B * H, D)

    B, Nq, H, _ = q.shape
    out = seed["linear_attention"](nld(q), nld(k), nld(v))
    return out.reshape(Nq, B, H, -1).permute(1, 0, 2, 3)


def visible(Nq, Nk, causal, key_lengths, B):
    """mask [B, 1, Nq, Nk]: query i sees key j (j < key_lengths[b]; j ≤ i + Nk − Nq when causal)."""
    i = torch.arange(Nq)[:, None]
    j = torch.arange(Nk)[None, :]
    lengths = torch.full((B,), Nk) if key_lengths is None else torch.as_tensor(np.asarray(key_lengths))
    mask = (j[None] < lengths[:, None, None]).expand(B, Nq, Nk)
    if causal:
        mask = mask & (j <= i + (Nk - Nq))[None]
    return mask[:, None]


def torch_softmax(q, k, v, causal=False, key_lengths=None, scale=None):
    """softmax attention in torch's own ops, [B, N, H, D] in and out; a row that sees no key is 0."""
    B, Nq, H, D = q.shape
    Nk = k.shape[1]
    scale = D**-0.5 if scale is None else scale
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    mask = visible(Nq, Nk, causal, key_lengths, B)
    scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # fully masked rows: nan -> 0
    return torch.einsum("bhij,bjhe->bihe", p, v)


FEATURE_MAPS = {
    "elu": lambda x: torch.nn.functional.elu(x) + 1,
    "relu": torch.relu,
    "identity": lambda x: x,
}


def torch_linear(q, k, v, feature_map="elu", causal=False, key_lengths=None, eps=1e-6):
    """φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + eps) over the visible keys, as a masked
    [Nq, Nk] product in torch's own ops."""
    phi = FEATURE_MAPS[feature_map]
    B, Nq, H, D = q.shape
    a = torch.einsum("bihd,bjhd->bhij", phi(q), phi(k))
    a = a * visible(Nq, k.shape[1], causal, key_lengths, B)
    return torch.einsum("bhij,bjhe->bihe", a, v) / (a.sum(-1).transpose(1, 2)[..., None] + eps)


LAYOUTS = ("bnhd", "bhnd", "padded")


def layout_array(x, layout):
    """x [B, N, H, D] as float32 in memory laid out as `layout`, viewed as [B, N, H, D] (no copy)."""
    x = np.asarray(x, dtype=np.float32)
    if layout == "bnhd":
        return np.ascontiguousarray(x)
    if layout == "bhnd":
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    if layout == "padded":  # gaps after each row, head and token, filled with NaN
        B, N, H, D = x.shape
        big = np.full((B, N + 1, H + 1, D + 3), np.nan, dtype=np.float32)
        big[:, :N, :H, :D] = x
        return big[:, :N, :H, :D]
    raise ValueError(layout)


def rel_err(got, want):
    """max |got − want| / max |want|: the error scaled by the tensor's magnitude, as tests/support does."""
    got = torch.as_tensor(np.asarray(got) if not isinstance(got, torch.Tensor) else got).double()
    want = torch.as_tensor(np.asarray(want) if not isinstance(want, torch.Tensor) else want).double()
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    return err / scale if scale > 0 else err


def assert_close(got, want, tol, what):
    """|got − want| ≤ tol · max(1, max |want|) over the whole tensor, got finite and of want's shape; the
    recurrences' tests (test_delta, test_fla) with TOL per dtype."""
    got, want = got.detach().double(), want.detach().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    assert torch.isfinite(got).all(), f"{what}: not finite"
    err = (got - want).abs().max().item()
    bound = tol * max(1.0, want.abs().max().item())
    assert err <= bound, f"{what}: max error {err:.3g} > {bound:.3g}"


TOL = {torch.float32: 2e-4, torch.float64: 1e-10}


def assert_outputs_and_gradients(name, outs, refs, leaves, leaves64, names, dtype, seed, grads=True):
    """A recurrence's outputs (o, final_state and, where refs has one, the final z) against the
    reference's, then the gradients of every given leaf (named by `names`) of a random weighted sum of
    the outputs (weights from seed + 2, in the outputs' order) against the reference's leaves64."""
    tol = TOL[dtype]
    assert outs[0].dtype == dtype and outs[1].dtype == dtype
    for out, ref, what in zip(outs, refs, ["o", "final_state", "final z"]):
        if ref is not None:
            assert_close(out, ref, tol, f"{name} {what}")
    if not grads:
        return
    gen = torch.Generator().manual_seed(seed + 2)
    weights = [None if r is None else torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in refs]

    def loss(xs, dtype):
        return sum((x * w.to(dtype)).sum() for x, w in zip(xs, weights) if w is not None)

    wanted = [i for i, x in enumerate(leaves) if x is not None]
    got = torch.autograd.grad(loss(outs, dtype), [leaves[i] for i in wanted])
    want = torch.autograd.grad(loss(refs, torch.float64), [leaves64[i] for i in wanted])
    for i, a, b in zip(wanted, got, want):
        assert_close(a, b, tol, f"{name} d{names[i]}")


def randn(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)
