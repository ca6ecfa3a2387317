"""The C API (include/linattn/linattn.h) through Python's ctypes: liblinattn_c loads and runs without
any C++ on the caller's side. One forward against numpy, one error with its status and message, and
the info JSON. The library is found in $LINATTN_BUILD_DIR (scripts/test.sh) or the build tree the
module was imported from."""

import ctypes
import json
import os
import pathlib

import numpy as np
import pytest

import linattn

PACKAGE = pathlib.Path(linattn.__file__).resolve().parent
BUILD = pathlib.Path(os.environ.get("LINATTN_BUILD_DIR") or PACKAGE.parent.parent)
LIBRARY = next(iter(sorted(BUILD.glob("liblinattn_c.so*"))), None)

pytestmark = pytest.mark.skipif(LIBRARY is None, reason=f"no liblinattn_c.so in {BUILD} (set LINATTN_BUILD_DIR)")

LINATTN_OK, LINATTN_ERROR_INVALID_ARGUMENT = 0, 1
LINATTN_F32, LINATTN_BF16, LINATTN_F16 = 0, 1, 2


class Tensor(ctypes.Structure):
    """linattn_tensor: data, dtype, four extents, four strides (in elements)."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("extent", ctypes.c_int64 * 4),
                ("stride", ctypes.c_int64 * 4)]


def tensor(array, dtype=LINATTN_F32):
    assert array.dtype == (np.float16 if dtype == LINATTN_F16 else np.float32) and array.ndim == 4
    return Tensor(array.ctypes.data, dtype, (ctypes.c_int64 * 4)(*array.shape),
                  (ctypes.c_int64 * 4)(*(s // array.itemsize for s in array.strides)))


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(str(LIBRARY))
    lib.linattn_last_error.restype = ctypes.c_char_p
    lib.linattn_info_json.restype = ctypes.c_char_p
    lib.linattn_version.restype = ctypes.c_char_p
    lib.linattn_softmax_forward.argtypes = [ctypes.POINTER(Tensor), ctypes.c_void_p] + [ctypes.POINTER(Tensor)] * 3 + [
        ctypes.c_void_p]
    return lib


def test_softmax_forward_matches_numpy(lib):
    rng = np.random.default_rng(0)
    B, N, H, D = 2, 7, 3, 5
    q, k, v = (rng.standard_normal((B, N, H, D), dtype=np.float32) for _ in range(3))
    # A transposed (strided) q: the descriptor carries its strides, no copy is made.
    q = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    out = np.zeros((B, N, H, D), np.float32)
    lse = np.zeros((B, H, N), np.float32)
    status = lib.linattn_softmax_forward(tensor(out), lse.ctypes.data, tensor(q), tensor(k), tensor(v), None)
    assert status == LINATTN_OK, lib.linattn_last_error()
    s = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("bhij,bjhd->bihd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    np.testing.assert_allclose(out, want, atol=1e-5)
    assert lib.linattn_version().decode() == linattn.__version__


def test_float16_descriptors(lib):
    """numpy float16 arrays through LINATTN_F16 descriptors: the softmax forward gives the f32 operator's
    result on the same values, rounded once to float16 (numpy's rounding, to nearest even)."""
    rng = np.random.default_rng(3)
    B, N, H, D = 2, 65, 3, 8
    q, k, v = (rng.standard_normal((B, N, H, D)).astype(np.float16) for _ in range(3))
    out16, out32 = np.zeros((B, N, H, D), np.float16), np.zeros((B, N, H, D), np.float32)
    lse16, lse32 = np.zeros((B, H, N), np.float32), np.zeros((B, H, N), np.float32)
    status = lib.linattn_softmax_forward(tensor(out16, LINATTN_F16), lse16.ctypes.data, tensor(q, LINATTN_F16),
                                         tensor(k, LINATTN_F16), tensor(v, LINATTN_F16), None)
    assert status == LINATTN_OK, lib.linattn_last_error()
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    status = lib.linattn_softmax_forward(tensor(out32), lse32.ctypes.data, tensor(q32), tensor(k32), tensor(v32), None)
    assert status == LINATTN_OK, lib.linattn_last_error()
    np.testing.assert_array_equal(out16, out32.astype(np.float16))
    np.testing.assert_array_equal(lse16, lse32)


def test_errors_carry_status_and_message(lib):
    x = np.ones((1, 3, 1, 4), np.float32)
    out, lse = np.zeros_like(x), np.zeros(3, np.float32)
    status = lib.linattn_softmax_forward(tensor(out), lse.ctypes.data, tensor(x), tensor(x), tensor(x, LINATTN_BF16),
                                         None)
    assert status == LINATTN_ERROR_INVALID_ARGUMENT
    assert b"v.dtype is LINATTN_BF16, expected LINATTN_F32" in lib.linattn_last_error()
    k = np.ones((1, 3, 1, 5), np.float32)  # head dim 5 against q's 4
    status = lib.linattn_softmax_forward(tensor(out), lse.ctypes.data, tensor(x), tensor(k), tensor(x), None)
    assert status == LINATTN_ERROR_INVALID_ARGUMENT
    assert b"k.extent[3]" in lib.linattn_last_error()


def test_info_json_is_the_python_info(lib):
    info = json.loads(lib.linattn_info_json().decode())
    py = linattn.info()
    for key in ("version", "architecture", "features", "compiled_targets", "supported_targets",
                "dispatched_target"):
        assert info[key] == py[key], key
    assert info["dispatched_target"] in info["supported_targets"]


class DecayOptions(ctypes.Structure):
    """linattn_decay_options."""
    _fields_ = [("decay", ctypes.c_int32), ("has_scale", ctypes.c_int), ("scale", ctypes.c_float),
                ("g_gamma", ctypes.c_void_p), ("n_g_gamma", ctypes.c_int64), ("cu_seqlens", ctypes.c_void_p),
                ("n_cu_seqlens", ctypes.c_int64), ("chunk_size", ctypes.c_int64)]


def test_defect42_12_quiet_acceptances_are_refused(lib):
    """Issue 42 item 12 from a foreign caller: a pointer with a count of 0 was "none", a bf16 final_state
    was remade f32, a name save cannot write was taken at create, a role outside the enum was loaded as
    the enum."""
    LINATTN_ERROR_UNSUPPORTED_DTYPE = 3
    B, N, H, K = 1, 6, 2, 4
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((B, N, H, K), dtype=np.float32) for _ in range(3))
    out, final = np.zeros((B, N, H, K), np.float32), np.zeros((B, H, K, K), np.float32)
    cu = np.array([0, N], np.int64)
    options = DecayOptions()
    lib.linattn_decay_options_init(ctypes.byref(options))
    args = [ctypes.byref(tensor(x)) for x in (out, q, k, v)]
    status = lib.linattn_decayed_forward(*args, None, None, None, ctypes.c_void_p(final.ctypes.data), ctypes.c_int64(0))
    assert status == LINATTN_ERROR_INVALID_ARGUMENT
    assert b"final_state is a pointer with a count of 0" in lib.linattn_last_error()
    options.cu_seqlens, options.n_cu_seqlens = cu.ctypes.data, 0
    status = lib.linattn_decayed_forward(*args, None, ctypes.byref(options), None, None, ctypes.c_int64(0))
    assert status == LINATTN_ERROR_INVALID_ARGUMENT
    assert b"options->cu_seqlens is a pointer with a count of 0" in lib.linattn_last_error()
    options.n_cu_seqlens = 2  # the same call with its count runs
    status = lib.linattn_decayed_forward(*args, None, ctypes.byref(options), None,
                                         ctypes.c_void_p(final.ctypes.data), ctypes.c_int64(final.size))
    assert status == LINATTN_OK, lib.linattn_last_error()

    state = ctypes.c_void_p()
    i64 = ctypes.c_int64
    assert lib.linattn_state_create(i64(B), i64(H), i64(K), i64(K), b"two words", ctypes.byref(state)) == \
        LINATTN_ERROR_INVALID_ARGUMENT and not state.value
    assert b"printable ASCII characters without spaces" in lib.linattn_last_error()
    status = lib.linattn_state_create_dtype(i64(B), i64(H), i64(K), i64(K), b"elu", ctypes.c_int32(LINATTN_BF16),
                                            ctypes.byref(state))
    assert status == LINATTN_OK, lib.linattn_last_error()
    try:
        status = lib.linattn_causal_linear_forward(*args, None, None, state)
        assert status == LINATTN_ERROR_UNSUPPORTED_DTYPE
        assert b"final_state is a LINATTN_BF16 state" in lib.linattn_last_error()
        dtype = ctypes.c_int32(-1)
        assert lib.linattn_state_dtype(state, ctypes.byref(dtype)) == LINATTN_OK and dtype.value == LINATTN_BF16
    finally:
        lib.linattn_state_free(state)

    feature_map = ctypes.c_void_p()
    assert lib.linattn_feature_map_create(b"elu", ctypes.byref(feature_map)) == LINATTN_OK
    try:
        x, phi = np.ones((2, K), np.float32), np.zeros((2, K), np.float32)
        status = lib.linattn_feature_map_forward(feature_map, ctypes.c_void_p(phi.ctypes.data),
                                                 ctypes.c_void_p(x.ctypes.data), i64(2), i64(K), ctypes.c_int(7))
        assert status == LINATTN_ERROR_INVALID_ARGUMENT and b"role is 7" in lib.linattn_last_error()
    finally:
        lib.linattn_feature_map_free(feature_map)
