"""Bad input raises TypeError (wrong type or dtype) or ValueError (wrong dims, shapes, values), with a
message that names the argument."""

import numpy as np
import pytest
import torch

import linattn
import linattn.torch as lt


def qkv(B=2, Nq=5, Nk=6, H=3, D=4, E=7, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((B, Nq, H, D)).astype(dtype), rng.standard_normal((B, Nk, H, D)).astype(dtype),
            rng.standard_normal((B, Nk, H, E)).astype(dtype))


FORWARDS = [linattn.softmax_attention, linattn.linear_attention]
BACKWARDS = [linattn.softmax_attention_backward, linattn.linear_attention_backward]


def call(fn, q, k, v, dout=None, **kw):
    if fn in BACKWARDS or fn in (linattn.reference.softmax_attention_backward,
                                 linattn.reference.linear_attention_backward):
        if dout is None:
            dout = np.zeros(q.shape[:3] + v.shape[3:], dtype=q.dtype)
        return fn(q, k, v, dout, **kw)
    return fn(q, k, v, **kw)


@pytest.mark.parametrize("fn", FORWARDS + BACKWARDS)
@pytest.mark.parametrize("arg", [0, 1, 2])
def test_wrong_dtype_is_a_type_error(fn, arg):
    args = list(qkv())
    args[arg] = args[arg].astype(np.float64)
    with pytest.raises(TypeError, match=f"^{'qkv'[arg]}: expected float32, got float64$"):
        call(fn, *args)


@pytest.mark.parametrize("bad, name", [(np.zeros((1, 2, 3, 4), dtype=np.int32), "int32"),
                                       (np.zeros((1, 2, 3, 4), dtype=np.float16), "float16"),
                                       (np.zeros((1, 2, 3, 4), dtype=">f4"), ">f4")])
def test_other_dtypes_are_never_cast(bad, name):
    q, k, v = qkv(B=1, Nq=2, Nk=2, H=3, D=4, E=4)
    with pytest.raises(TypeError, match=f"^v: expected float32, got {name}$"):
        linattn.softmax_attention(q, k, bad)


def test_non_arrays_are_a_type_error():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="^q: expected a numpy.ndarray of float32, got list$"):
        linattn.linear_attention(q.tolist(), k, v)
    with pytest.raises(TypeError, match="^k: expected a numpy.ndarray of float32, got Tensor$"):
        linattn.softmax_attention(q, torch.from_numpy(k), v)


@pytest.mark.parametrize("fn", FORWARDS + BACKWARDS)
def test_wrong_ndim_is_a_value_error(fn):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"^v: expected 4 dims \[B, Nk, H, E\], got 3$"):
        call(fn, q, k, v[0])
    with pytest.raises(ValueError, match=r"^q: expected 4 dims \[B, Nq, H, D\], got 5$"):
        call(fn, q[None], k, v)


@pytest.mark.parametrize("fn", FORWARDS + BACKWARDS)
def test_mismatched_shapes_name_the_argument(fn):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"\bk\b.*\b3\b.*\b4\b"):  # k's head dim 3 vs q's 4
        call(fn, q, k[..., :3], v)
    with pytest.raises(ValueError, match=r"\bk\b.*batch"):
        call(fn, q, k[:1], v)
    with pytest.raises(ValueError, match=r"\bv\b"):  # v's length 5 vs k's 6
        call(fn, q, k, v[:, :5])
    with pytest.raises(ValueError, match=r"\bv\b.*heads"):
        call(fn, q, k, v[:, :, :2])
    with pytest.raises(ValueError, match=r"extent\[1\].*is 0"):
        call(fn, q[:, :0], k, v)


@pytest.mark.parametrize("fn", BACKWARDS + [linattn.reference.softmax_attention_backward])
def test_mismatched_dout_names_dout(fn):
    q, k, v = qkv(dtype=np.float64 if fn is linattn.reference.softmax_attention_backward else np.float32)
    dout = np.zeros((2, 5, 3, 6), dtype=q.dtype)  # E is 7
    with pytest.raises(ValueError, match=r"\bdout\b"):
        fn(q, k, v, dout)


@pytest.mark.parametrize("fn", FORWARDS)
def test_key_lengths_checks(fn):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="key_lengths has 3 entries, expected 2"):
        fn(q, k, v, key_lengths=[1, 2, 3])
    with pytest.raises(ValueError, match=r"key_lengths\[1\] is 7, expected a value in \[0, 6\]"):
        fn(q, k, v, key_lengths=[1, 7])
    with pytest.raises(ValueError, match=r"key_lengths\[0\] is -1"):
        fn(q, k, v, key_lengths=np.array([-1, 2]))
    with pytest.raises(TypeError, match="^key_lengths: expected integers, got float64$"):
        fn(q, k, v, key_lengths=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"^key_lengths: expected 1 dim \[B\], got 2$"):
        fn(q, k, v, key_lengths=[[1, 2]])


def test_feature_map_checks():
    q, k, v = qkv()
    with pytest.raises(ValueError, match='feature_map is "softmax", expected one of'):
        linattn.linear_attention(q, k, v, feature_map="softmax")
    with pytest.raises(ValueError, match='^n_features: only feature_map="favor" takes it'):
        linattn.linear_attention(q, k, v, n_features=8)


def test_reference_checks():
    q, k, v = qkv(dtype=np.float64)
    with pytest.raises(TypeError, match="^q: expected float64, got float32$"):
        linattn.reference.softmax_attention(q.astype(np.float32), k, v)
    for fn in (linattn.reference.softmax_attention, linattn.reference.linear_attention):
        with pytest.raises(ValueError, match=r"\bk\b.*head dim"):
            fn(q, k[..., :3], v)
        with pytest.raises(ValueError, match=r"\bv\b.*sequence"):
            fn(q, k, v[:, :5])
        with pytest.raises(ValueError, match=r"key_lengths\[0\] is 9"):
            fn(q, k, v, key_lengths=[9, 1])
        with pytest.raises(ValueError, match=r"q.extent\[3\] \(dim\) is 0"):
            fn(q[..., :0], k[..., :0], v)


def test_torch_wrapper_checks():
    q, k, v = (torch.from_numpy(x) for x in qkv())
    with pytest.raises(TypeError, match="^v: expected float32 .*got torch.float16$"):
        lt.softmax_attention(q, k, v.half(), layout="bnhd")
    with pytest.raises(TypeError, match=r"^k: expected torch.float32 \(q's dtype\), got torch.float64$"):
        lt.linear_attention(q, k.double(), v, layout="bnhd")
    with pytest.raises(TypeError, match="^q: expected a torch.Tensor, got ndarray$"):
        lt.linear_attention(q.numpy(), k, v, layout="bnhd")
    with pytest.raises(TypeError, match="^key_lengths: expected integers, got torch.float32$"):
        lt.softmax_attention(q, k, v, key_lengths=torch.tensor([1.0, 2.0]), layout="bnhd")
    with pytest.raises(ValueError, match=r"\bk\b.*head dim|\bk\b.*dim"):
        lt.softmax_attention(q, k[..., :3], v, layout="bnhd")
    with pytest.raises(TypeError, match="^q: expected a CPU tensor, got device meta$"):
        lt.softmax_attention(q.to("meta"), k, v, layout="bnhd")
    with pytest.raises(ValueError, match='^attention: expected "linear" or "softmax"'):
        lt.Attention(8, 2, attention="performer")
    with pytest.raises(ValueError, match="^d_model: 9 is not a multiple of n_heads"):
        lt.Attention(9, 2)


def test_state_checks(tmp_path):
    state = linattn.RecurrentState(2, 3, 4, 5)
    q = np.zeros((2, 3, 4), np.float32)
    v = np.zeros((2, 3, 5), np.float32)
    with pytest.raises(TypeError, match="^k: expected float32, got float64$"):
        state.step(q, q.astype(np.float64), v)
    with pytest.raises(ValueError, match=r"^v: expected 3 dims \[B, H, E\], got 4$"):
        state.step(q, q, v[:, None])
    with pytest.raises(ValueError, match=r"\bv\b"):  # value dim 4, the state's is 5
        state.step(q, q, v[..., :4])
    with pytest.raises(ValueError, match=r"\bq\b"):  # 2 heads, the state's are 3
        state.step(q[:, :2], q, v)
    with pytest.raises(ValueError, match="^dim: expected ≥ 1, got 0$"):
        linattn.RecurrentState(2, 3, 0, 5)
    with pytest.raises(ValueError, match="heads is -1"):
        linattn.RecurrentState(2, -1, 4, 5)
    with pytest.raises(ValueError, match="feature_map"):
        linattn.RecurrentState(2, 3, 4, 5, "tanh")
    with pytest.raises(ValueError, match="missing"):
        state.load(tmp_path / "missing")


def test_saved_state_checks():
    q, k, v = qkv()
    out, lse = linattn._linattn._softmax_attention_saving(q, k, v)
    dout = np.zeros_like(out)
    with pytest.raises(TypeError, match="^lse: expected a numpy.ndarray of float32, got float64$"):
        linattn._linattn._softmax_attention_backward_saved(q, k, v, out, lse.astype(np.float64), dout)
    with pytest.raises(ValueError, match=r"\blse has 15 elements, expected 30"):
        linattn._linattn._softmax_attention_backward_saved(q, k, v, out, lse[:1], dout)
    with pytest.raises(ValueError, match=r"^out: expected 4 dims"):
        linattn._linattn._softmax_attention_backward_saved(q, k, v, out[0], lse, dout)


def test_defect11_outputs_larger_than_memory_are_refused_before_allocation():
    """Issue 17, defect 11: stride-0 inputs give a huge logical shape in little memory; the output of that
    shape is refused with a MemoryError naming it, before numpy allocates."""
    one = np.ones((1, 1, 1, 64), np.float32)
    huge = np.lib.stride_tricks.as_strided(one, shape=(1, 1 << 40, 1, 64), strides=(0, 0, 0, 4))
    with pytest.raises(MemoryError, match=r"output of shape \[1, 1099511627776, 1, 64\] needs"):
        linattn.linear_attention(huge, huge, huge)
