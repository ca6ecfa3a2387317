"""linattn on a torch before 2.4 (no torch.library.custom_op), as Debian 12's python3-torch 1.13 is
(issue 42 item 8: linattn.fla and linattn.layers failed to import there with an AttributeError).

linattn.fla runs there through torch.autograd.Function (the same computations): checked here against
its own fp64 oracle, forward and backward. linattn.layers needs torch 2.4 (torch.nn.functional.rms_norm)
and says so with an ImportError that names the version. The old torch lives in another interpreter
(/usr/bin/python3), so the checks run in a subprocess over a copy of the installed package."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

import linattn

OLD_PYTHON = pathlib.Path("/usr/bin/python3")

_PROBE = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import linattn.fla as fla
result = {"torch": torch.__version__}
torch.manual_seed(0)

def relative_error(a, b):
    return float((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-30))

def run(fn, dtype, **extra):
    B, T, H, K, V = 2, 65, 2, 9, 7
    g = torch.Generator().manual_seed(1)
    q, k = (torch.rand(B, T, H, K, generator=g, dtype=torch.float64) - 0.5 for _ in range(2))
    v = torch.rand(B, T, H, V, generator=g, dtype=torch.float64) - 0.5
    inputs = [x.to(dtype).requires_grad_() for x in (q, k, v)]
    tensors = {name: x(g).to(dtype).requires_grad_() for name, x in extra.items()}
    o, final = fn(*inputs, **tensors, output_final_state=True)
    (o.sum() + final.sum()).backward()
    return [o.detach(), final.detach()] + [x.grad for x in inputs] + [x.grad for x in tensors.values()]

cases = {
    "chunk_gla": (fla.chunk_gla, {"g": lambda g: -torch.rand(2, 65, 2, 9, generator=g, dtype=torch.float64)}),
    "chunk_gated_delta_rule": (lambda q, k, v, **kw: fla.chunk_gated_delta_rule(
        q, k, v, use_qk_l2norm_in_kernel=True, **kw),
        {"g": lambda g: -torch.rand(2, 65, 2, generator=g, dtype=torch.float64),
         "beta": lambda g: torch.rand(2, 65, 2, generator=g, dtype=torch.float64)}),
    "fused_recurrent_simple_gla": (fla.fused_recurrent_simple_gla,
                                   {"g": lambda g: -torch.rand(2, 65, 2, generator=g, dtype=torch.float64)}),
}
for name, (fn, extra) in cases.items():
    fast, oracle = run(fn, torch.float32, **extra), run(fn, torch.float64, **extra)
    result[name] = max(relative_error(a, b) for a, b in zip(fast, oracle))
try:
    import linattn.layers
    result["layers"] = "imported"
except ImportError as e:
    result["layers"] = str(e)
print(json.dumps(result))
"""


def _old_torch():
    if not OLD_PYTHON.is_file():
        pytest.skip(f"{OLD_PYTHON} is absent")
    probe = subprocess.run([str(OLD_PYTHON), "-c", "import sys, torch; print(torch.__version__); "
                            "print(sys.version_info[:2] == tuple(map(int, sys.argv[1].split('.'))))",
                            f"{sys.version_info[0]}.{sys.version_info[1]}"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{OLD_PYTHON} has no torch (Debian's python3-torch)")
    version, same_python = probe.stdout.split()
    if same_python != "True":
        pytest.skip(f"{OLD_PYTHON} is another Python version than the one linattn was built for")
    major, minor = (int("".join(c for c in p if c.isdigit())) for p in version.split("+")[0].split(".")[:2])
    if (major, minor) >= (2, 4):
        pytest.skip(f"{OLD_PYTHON}'s torch is {version}, not older than 2.4")
    return version


def test_fla_runs_and_layers_refuse_by_version_on_torch_before_2_4(tmp_path):
    version = _old_torch()
    # A copy of the installed package alone: the venv's site-packages would bring its own torch along.
    shutil.copytree(pathlib.Path(linattn.__file__).parent, tmp_path / "linattn",
                    ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run([str(OLD_PYTHON), "-c", _PROBE, str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["torch"] == version
    for name in ("chunk_gla", "chunk_gated_delta_rule", "fused_recurrent_simple_gla"):
        assert result[name] < 1e-4, (name, result[name])
    assert "needs PyTorch >= 2.4" in result["layers"] and "rms_norm" in result["layers"], result["layers"]
