"""Threads when linattn is called from torch: torch's intra-op thread count, unless told otherwise.

pip's torch on Linux and linattn share one OpenMP runtime (the loader keeps one libgomp.so.1), so
their counts are one setting and linattn follows torch.set_num_threads by itself; where the runtimes
differ, the count is copied from torch.get_num_threads() before each call. linattn.set_num_threads(n)
with n > 0 is "told otherwise": linattn's calls from torch then run n threads, and torch's count is
put back after each call. set_num_threads(0) hands the choice back to torch.
"""

import contextlib

import torch

from . import _linattn
from ._threads import explicit


@contextlib.contextmanager
def torch_threads():
    torch_count = torch.get_num_threads()
    want = explicit[0] or torch_count
    before = _linattn.num_threads()
    if before == want:
        yield
        return
    _linattn.set_num_threads(want)
    try:
        yield
    finally:
        if explicit[0]:
            _linattn.set_num_threads(torch_count)  # the shared runtime's count is torch's again
