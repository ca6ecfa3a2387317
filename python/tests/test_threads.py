"""Results are bitwise identical for any thread count (fixed reduction order, no float atomics)."""

import numpy as np
import pytest

import linattn


@pytest.fixture
def restore_threads():
    yield
    linattn.set_num_threads(0)


@pytest.mark.parametrize("causal", [False, True])
def test_bitwise_identical_for_any_thread_count(restore_threads, causal):
    rng = np.random.default_rng(0)
    q, k = (rng.uniform(-1, 1, (2, 300, 3, 33)).astype(np.float32) for _ in range(2))
    v, dout = (rng.uniform(-1, 1, (2, 300, 3, 17)).astype(np.float32) for _ in range(2))
    kw = dict(causal=causal, key_lengths=[300, 123])
    results = []
    for threads in (1, 2, 3):
        linattn.set_num_threads(threads)
        assert linattn.num_threads() == threads
        results.append([linattn.softmax_attention(q, k, v, **kw), linattn.linear_attention(q, k, v, **kw),
                        *linattn.softmax_attention_backward(q, k, v, dout, **kw),
                        *linattn.linear_attention_backward(q, k, v, dout, **kw)])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b)
