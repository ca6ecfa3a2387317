"""`cmake --install <build> --component python` installs an importable package (docs/python.md)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import linattn

PACKAGE = pathlib.Path(linattn.__file__).resolve().parent
BUILD = PACKAGE.parent.parent  # <build>/python/linattn


@pytest.mark.skipif(not (BUILD / "CMakeCache.txt").exists() or shutil.which("cmake") is None,
                    reason="linattn was not imported from a CMake build tree")
def test_install_component_into_a_prefix(tmp_path):
    subprocess.run(["cmake", "--install", str(BUILD), "--component", "python", "--prefix", str(tmp_path)],
                   check=True, capture_output=True)
    site = tmp_path / f"lib/python{sys.version_info.major}.{sys.version_info.minor}/dist-packages"
    assert sorted(p.name for p in (site / "linattn").iterdir() if not p.name.startswith("__pycache__")) == sorted(
        p.name for p in PACKAGE.iterdir() if p.suffix in (".py", ".so"))
    code = ("import numpy as np, linattn, linattn.torch; x = np.ones((1, 3, 1, 2), np.float32); "
            "print(linattn.__file__); print(linattn.softmax_attention(x, x, x).sum())")
    env = dict(os.environ, PYTHONPATH=str(site))
    result = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True,
                            cwd=tmp_path)
    file, total = result.stdout.split()
    assert pathlib.Path(file).resolve().is_relative_to(site.resolve())
    assert float(total) == 6.0
