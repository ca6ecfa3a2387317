"""The oldest torch each torch-facing module runs on, checked at import so that an older torch gets an
ImportError that names what to install, not an AttributeError from deep inside (docs/python.md)."""

import torch


def torch_version(version=None):
    """torch's (major, minor) from its version string ("1.13.0a0+git..." -> (1, 13))."""
    parts = (version or torch.__version__).split("+")[0].split(".")
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in parts[:2])


def require_torch(module, minimum, needs):
    """Raises ImportError unless torch is at least minimum, a (major, minor) pair; needs: the torch feature
    that sets the minimum, for the message."""
    if torch_version() < minimum:
        want = ".".join(map(str, minimum))
        raise ImportError(f"{module} needs PyTorch >= {want} ({needs}); this is torch {torch.__version__} from "
                          f"{torch.__file__}. Install a newer one, e.g. pip install 'torch>={want}' "
                          "(linattn.fla and linattn.torch also run on older torch)")
