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


@pytest.mark.parametrize("bad", [100000, -1, "2", 2.0, True, None])
def test_refused_set_num_threads_changes_nothing(restore_threads, bad):
    """A refused count (too many, negative, a string, a float, a bool) raises, naming threads, and leaves
    the remembered count as it was: linattn.torch and linattn.fla calls that follow still run with it (issue
    42 item 10: the count was stored before the library refused it)."""
    from linattn import _threads
    linattn.set_num_threads(2)
    with pytest.raises((ValueError, TypeError), match="threads"):
        linattn.set_num_threads(bad)
    assert _threads.explicit[0] == 2
    assert linattn.num_threads() == 2
