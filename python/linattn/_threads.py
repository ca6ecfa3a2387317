"""linattn.set_num_threads, remembering whether a count was given (linattn.torch follows torch's
intra-op count until one is: docs/pytorch.md "Threads")."""

import operator

from . import _linattn

explicit = [0]  # the count given to set_num_threads; 0: none (the OpenMP default, or torch's from linattn.torch)


def set_num_threads(threads):
    """Threads used by the operators; results are identical for any count. threads > 0 fixes the count
    (also for calls from torch); 0 restores the default (from torch: torch.get_num_threads()).

    A refused count changes nothing: the library validates it first, and only then is it remembered."""
    if isinstance(threads, bool):
        raise TypeError("threads: expected an integer count of threads, got a bool")
    try:
        count = operator.index(threads)  # an integer, not a string or a float that int() would take
    except TypeError:
        raise TypeError(f"threads: expected an integer count of threads, got {type(threads).__name__} "
                        f"{threads!r}") from None
    _linattn.set_num_threads(count)  # raises, naming threads, for a count the library refuses
    explicit[0] = max(count, 0)
