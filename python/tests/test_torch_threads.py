"""Called from torch, linattn runs torch.get_num_threads() threads unless linattn.set_num_threads(n > 0)
said otherwise; importing torch does not change linattn's count; waiting threads sleep (issue 15)."""

import os
import subprocess
import sys

import pytest
import torch

import linattn
import linattn.torch as lt
from linattn import _linattn


@pytest.fixture
def restore():
    before = torch.get_num_threads()
    yield
    linattn.set_num_threads(0)
    torch.set_num_threads(before)


def call(monkeypatch):
    """Runs a forward and backward of each operator; returns the thread counts the C++ calls saw."""
    seen = []
    for name in ("_softmax_attention_saving", "_softmax_attention_backward_saved", "linear_attention",
                 "linear_attention_backward"):
        def counted(*args, _run=getattr(_linattn, name), **kwargs):
            seen.append(_linattn.num_threads())
            return _run(*args, **kwargs)

        monkeypatch.setattr(_linattn, name, counted)
    q = torch.rand(1, 8, 2, 4, requires_grad=True)
    lt.softmax_attention(q, q, q, layout="bnhd").sum().backward()
    lt.linear_attention(q, q, q, layout="bnhd").sum().backward()
    monkeypatch.undo()
    assert len(seen) == 4
    return set(seen)


def test_follows_torch_unless_told(restore, monkeypatch):
    for threads in (1, 2, 3):
        torch.set_num_threads(threads)
        assert call(monkeypatch) == {threads}
    linattn.set_num_threads(2)
    torch.set_num_threads(1)
    assert call(monkeypatch) == {2}
    assert torch.get_num_threads() == 1  # torch's own count is left as torch set it
    linattn.set_num_threads(0)  # back to following torch
    torch.set_num_threads(3)
    assert call(monkeypatch) == {3}


def run(code, **env):
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    environment.update(env)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                          check=True).stdout.split()


def test_importing_torch_keeps_linattn_threads():
    before, after, torch_threads = run("import linattn; a = linattn.num_threads(); import torch; "
                                       "print(a, linattn.num_threads(), torch.get_num_threads())")
    assert before == after == torch_threads == str(os.cpu_count())
    # torch first, then linattn: the same count
    assert run("import torch, linattn; print(linattn.num_threads())") == [str(os.cpu_count())]


def test_waiting_threads_sleep_unless_the_environment_says():
    assert run("import linattn, os; print(os.environ['OMP_WAIT_POLICY'])") == ["PASSIVE"]
    assert run("import linattn, os; print(os.environ['OMP_WAIT_POLICY'])", OMP_WAIT_POLICY="active") == ["active"]
