"""Threads when linattn is called from torch: torch's intra-op thread count, unless told otherwise.

pip's torch on Linux and linattn share one OpenMP runtime (the loader keeps one libgomp.so.1), so
their counts are one setting and linattn follows torch.set_num_threads by itself; where the runtimes
differ, the count is copied from torch.get_num_threads() before each call. linattn.set_num_threads(n)
with n > 0 is "told otherwise": linattn's calls from torch then run n threads, and torch's count is
put back after each call. set_num_threads(0) hands the choice back to torch.
"""

import torch

from . import _linattn
from ._threads import explicit


class torch_threads:
    """with torch_threads(): a call of linattn's at the count above. A class rather than a
    contextlib.contextmanager generator: it wraps every call, a decode step's included, and the generator's
    machinery cost more than the two counts it compares."""

    __slots__ = ("_restore",)

    def __enter__(self):
        torch_count = torch.get_num_threads()
        want = explicit[0] or torch_count
        self._restore = None
        if _linattn.num_threads() != want:
            _linattn.set_num_threads(want)
            self._restore = torch_count
        return self

    def __exit__(self, *exc):
        if self._restore is not None and explicit[0]:
            _linattn.set_num_threads(self._restore)  # the shared runtime's count is torch's again
        return False
