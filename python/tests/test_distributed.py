"""linattn.distributed under mpiexec: each rank's shard against the single-process linattn.torch
(outputs and gradients, causal and not, uneven and empty shards, two runs bitwise alike, a shape that
disagrees between ranks refused on every rank). distributed_worker.py is the rank's side."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
DEBIAN_MPI4PY = pathlib.Path("/usr/lib/python3/dist-packages/mpi4py")


def _imports(module, env):
    return subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True).returncode == 0


def _environment(tmp):
    """The workers' environment, or a reason to skip. Where this interpreter (a venv, say) lacks
    mpi4py but Debian's python3-mpi4py is built for it, that package alone is put on PYTHONPATH (a
    folder holding only a link to it, so no other Debian package shadows the venv's)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if not _imports("linattn._distributed", env):
        return None, "linattn was built without LINATTN_MPI (no linattn._distributed)"
    if not _imports("mpi4py", env):
        abi = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
        if not (DEBIAN_MPI4PY.is_dir() and any(abi in p.name for p in DEBIAN_MPI4PY.glob("MPI.*.so"))):
            return None, f"mpi4py is not importable by {sys.executable} (apt-get install python3-mpi4py)"
        (tmp / "mpi4py").symlink_to(DEBIAN_MPI4PY)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp), env.get("PYTHONPATH")]))
    return env, None


@pytest.mark.parametrize("lengths", ["5,7", "6,0,9"], ids=["np2-uneven", "np3-empty-shard"])
def test_sharded_equals_single_process(lengths):
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec not found (apt-get install openmpi-bin)")
    with tempfile.TemporaryDirectory() as tmp:
        env, reason = _environment(pathlib.Path(tmp))
        if env is None:
            pytest.skip(reason)
        ranks = len(lengths.split(","))
        proc = subprocess.run([mpiexec, "-n", str(ranks), "--oversubscribe", sys.executable,
                               str(HERE / "distributed_worker.py"), lengths],
                              env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{ranks} ranks, shards [{lengths.replace(',', ', ')}]: ok" in proc.stdout, proc.stdout


def test_causal_shard_lengths():
    env = dict(os.environ)
    if not _imports("linattn._distributed", env):
        pytest.skip("linattn was built without LINATTN_MPI (no linattn._distributed)")
    script = ("import linattn.distributed as d\n"
              "print(d.causal_shard_lengths(1000, 3), d.causal_shard_lengths(1001, 2, 0.0))\n"
              "try:\n    d.causal_shard_lengths(10, 0)\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # n0 = ⌊1000 / (3 + 0.35 − 0.55·0.35)⌋ = 316; with sums_per_pass = 0 the shards are even.
    assert lines[0] == "[316, 316, 368] [500, 501]", lines
    assert "ranks is 0" in lines[1], lines
