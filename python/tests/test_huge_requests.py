"""Issue 42 item 9: a chunked recurrence asked for more memory than the process may allocate raises a
MemoryError naming the request before anything is allocated: the binding counts the outputs, the final
state [N, H, K, V] and the operator's chunked scratch (per thread its [C, C] matrices, row blocks and the
[K, V] state of each head it runs), and checks the total against linattn's reading of the process's
memory (the least of MemAvailable, the memory cgroup's limit less its usage and RLIMIT_AS less the
address space in use). The inputs are stride-0 expansions of one zero, so these tests allocate nothing
big themselves; each call is refused in well under a second."""

import resource

import numpy as np
import pytest
import torch

import linattn
from linattn import fla


def huge(*shape):
    """A float32 tensor of the given shape over a single element (every stride 0)."""
    return torch.zeros(()).expand(*shape)


def call(name, B, T, H, K, V, **kw):
    q, v, beta = huge(B, T, H, K), huge(B, T, H, V), huge(B, T, H)
    if name == "chunk_gla":
        return fla.chunk_gla(q, q, v, huge(B, T, H, K), **kw)
    if name == "chunk_kda":
        return fla.chunk_kda(q, q, v, huge(B, T, H, K), beta, **kw)
    return fla.chunk_delta_rule(q, q, v, beta, **kw)


OPS = ["chunk_gla", "chunk_kda", "chunk_delta_rule"]


def kernel_name(name):
    return "decayed_attention" if name == "chunk_gla" else "delta_rule"


@pytest.mark.parametrize("name", OPS)
def test_defect9_long_sequence_is_refused_naming_the_request(name):
    # T = 2^28 tokens: 4 TiB of output alone.
    with pytest.raises(MemoryError, match=rf"{kernel_name(name)} of q \[1, 268435456, 64, 64\] .* needs about "
                                          r"[\d.]+ TiB, but only .* is available \("):
        call(name, 1, 1 << 28, 64, 64, 64)


@pytest.mark.parametrize("name", OPS)
def test_defect9_final_state_of_many_heads_is_counted(name):
    # H = 2^20 heads with a final state [1, 2^20, 1024, 1024]: 4 TiB of state against 4 GiB of output,
    # which the output check alone let through to numpy and the operator.
    states = r"\(its outputs, 1 × \[1, 1048576, 1024, 1024\] states and the chunked scratch"
    with pytest.raises(MemoryError, match=states):
        call(name, 1, 1, 1 << 20, 1024, 1024, output_final_state=True)


@pytest.mark.parametrize("name", OPS)
def test_grouped_value_heads_states_are_counted_by_v_heads(name):
    # One q/k head and 2^20 value heads (grouped value heads): the final state [1, 2^20, 1024, 1024] is 4 TiB,
    # which a count by q's one head put at 4 MiB and let through to numpy's allocation.
    B, T, H, HV, K = 1, 1, 1, 1 << 20, 1024
    q, v, beta = huge(B, T, H, K), huge(B, T, HV, K), huge(B, T, HV)
    states = r"\(its outputs, 1 × \[1, 1048576, 1024, 1024\] states and the chunked scratch"
    with pytest.raises(MemoryError, match=states):
        if name == "chunk_gla":
            fla.chunk_gla(q, q, v, huge(B, T, HV, K), output_final_state=True)
        elif name == "chunk_kda":
            fla.chunk_kda(q, q, v, huge(B, T, HV, K), beta, output_final_state=True)
        else:
            fla.chunk_delta_rule(q, q, v, beta, output_final_state=True)


def address_space_in_use():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


@pytest.mark.parametrize("name", OPS)
def test_defect9_wide_heads_scratch_is_counted_under_an_address_space_limit(name):
    """K = V = 2^15: one head's [K, V] state in the operator's scratch is 4 GiB (the delta rule holds its
    gradient too), while the output is 128 KiB. Under an address-space limit 1 GiB above what the process
    uses, the binding refuses it naming the request; before, the operator's own allocation failed
    (std::bad_alloc) or, without a limit, took the gigabytes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = address_space_in_use() + (1 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit if soft == resource.RLIM_INFINITY else min(soft, limit), hard))
    try:
        with pytest.raises(MemoryError) as refused:
            call(name, 1, 1, 1, 1 << 15, 1 << 15)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    message = str(refused.value)
    assert f"{kernel_name(name)} of q [1, 1, 1, 32768] and v [1, 1, 1, 32768]" in message, message
    assert "GiB, but only" in message and "is available (" in message, message


@pytest.mark.parametrize("backward, gate", [(linattn._linattn.decayed_attention_backward, dict(decay="gla")),
                                            (linattn._linattn.delta_rule_backward, dict(gate="kda"))])
def test_defect9_backward_is_refused_naming_the_request(backward, gate):
    # The backward keeps the state before every chunk of a head: T = 2^28 at chunk 64 is 2^22 states.
    x = np.broadcast_to(np.float32(0), (1, 1 << 28, 4, 64))
    args = (x, x, x, x[..., 0], x) if "gate" in gate else (x, x, x, x)
    with pytest.raises(MemoryError, match=r"_backward of q \[1, 268435456, 4, 64\]"):
        backward(*args, x, **gate)
