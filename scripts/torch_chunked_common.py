"""What the pure-PyTorch baselines of issues 12 and 13 share (torch_chunked_decay.py,
torch_chunked_delta.py): the gate as the tests and the C++ benchmarks draw it, and the check that
holds a chunked formulation to the token-by-token recurrence, forward and gradients, in float64.
"""
import torch
import torch.nn.functional as F


def log_decays(*shape, dtype=torch.float32):
    """logsigmoid(N(0, 1)) / 16, as the tests and the C++ benchmarks draw the gate."""
    return F.logsigmoid(torch.randn(*shape, dtype=dtype)) / 16


def _outputs_and_gradients(fn, tensors, dout, **kwargs):
    """[o, final state, then the gradient of each tensor] of fn(*tensors, **kwargs) for the loss sum(o * dout)."""
    inputs = [x.clone().requires_grad_() for x in tensors]
    o, S = fn(*inputs, **kwargs)
    (o * dout).sum().backward()
    return [o.detach(), S.detach()] + [x.grad for x in inputs]


def expect_matches_recurrence(label, fn, recurrent, tensors, names, dout, chunks, tolerance, **kwargs):
    """fn at each chunk size against recurrent on the same tensors (float64): o, the final state and the
    gradients of `names` (one per tensor) within `tolerance` of the largest value, relative. Raises SystemExit
    naming `label`, the chunk and the first that differs."""
    want = _outputs_and_gradients(recurrent, tensors, dout, **kwargs)
    for C in chunks:
        got = _outputs_and_gradients(fn, tensors, dout, chunk=C, **kwargs)
        for what, a, w in zip(['o', 'final state'] + ['d' + n for n in names], got, want):
            err = ((a - w).abs().max() / w.abs().max()).item()
            if err > tolerance:
                raise SystemExit(f'torch chunked {label.format(C=C)}: {what} differs from the recurrence, '
                                 f'relative error {err:.2e}')
