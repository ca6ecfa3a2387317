"""linattn.set_num_threads, remembering whether a count was given (linattn.torch follows torch's
intra-op count until one is: docs/pytorch.md "Threads")."""

from . import _linattn

explicit = [0]  # the count given to set_num_threads; 0: none (the OpenMP default, or torch's from linattn.torch)


def set_num_threads(threads):
    """Threads used by the operators; results are identical for any count. threads > 0 fixes the count
    (also for calls from torch); 0 restores the default (from torch: torch.get_num_threads())."""
    explicit[0] = max(int(threads), 0)
    _linattn.set_num_threads(threads)
