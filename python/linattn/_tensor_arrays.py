"""What every torch wiring of linattn hands to the compiled module: a tensor's memory as a numpy array,
and the module that computes on a dtype. Needs no torch.library, so the wirings for torch without
custom_op (before 2.4) import it too."""

import torch

from . import _linattn


def array(x):
    """The tensor's memory as a numpy array, strides and all (no copy); None stays None. One call where
    numpy() takes the tensor as it is; one that needs a gradient or is a lazily conjugated or negated view
    (which numpy() refuses) is detached and resolved first: four calls each time were a sixth of a decode
    step's overhead."""
    if x is None:
        return None
    try:
        return x.numpy()
    except RuntimeError:
        return x.detach().resolve_conj().resolve_neg().numpy()


def backend(q):
    """float32: linattn's fast module; float64: the fp64 oracle."""
    return _linattn if q.dtype == torch.float32 else _linattn.reference
