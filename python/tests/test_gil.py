"""The GIL is released during compute: Python keeps running in the main thread while a long call
runs in another."""

import threading
import time

import numpy as np

import linattn


def test_python_runs_during_a_long_call():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4096, 4, 64)).astype(np.float32)
    linattn.set_num_threads(1)
    try:
        done = threading.Event()
        result = {}

        def work():
            start = time.perf_counter()
            result["out"] = linattn.softmax_attention(q, q, q)
            result["seconds"] = time.perf_counter() - start
            done.set()

        worker = threading.Thread(target=work)
        ticks, longest_gap = 0, 0.0
        last = time.perf_counter()
        worker.start()
        while not done.is_set():
            now = time.perf_counter()
            longest_gap = max(longest_gap, now - last)
            last = now
            ticks += 1
        worker.join()
    finally:
        linattn.set_num_threads(0)
    # Holding the GIL through the call would stall this loop for the call's whole duration; a quarter
    # leaves room for the scheduler on a busy machine.
    assert result["seconds"] > 0.05, "the call is too short to show anything"
    assert longest_gap < result["seconds"] / 4, (longest_gap, result["seconds"])
    assert ticks > 1000
    assert result["out"].shape == q.shape
