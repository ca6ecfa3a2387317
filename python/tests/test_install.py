"""`cmake --install <build> --component python` installs an importable package (docs/python.md)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import linattn

PACKAGE = pathlib.Path(linattn.__file__).resolve().parent
# The CMake build: $LINATTN_BUILD_DIR (scripts/test.sh, which tests the pip-installed package), or the
# build tree linattn was imported from (<build>/python/linattn).
BUILD = pathlib.Path(os.environ.get("LINATTN_BUILD_DIR") or PACKAGE.parent.parent)


@pytest.mark.skipif(not (BUILD / "CMakeCache.txt").exists() or shutil.which("cmake") is None,
                    reason="no CMake build tree to install from")
def test_install_component_into_a_prefix(tmp_path):
    subprocess.run(["cmake", "--install", str(BUILD), "--component", "python", "--prefix", str(tmp_path)],
                   check=True, capture_output=True)
    # lib/python3.X/dist-packages/linattn, or linattn at the prefix once `pip install .` configured the build
    installed = next(tmp_path.rglob("linattn/__init__.py")).parent
    site = installed.parent
    assert sorted(p.name for p in installed.iterdir() if not p.name.startswith("__pycache__")) == sorted(
        p.name for p in PACKAGE.iterdir() if p.suffix in (".py", ".so") or (p / "__init__.py").is_file())
    code = ("import numpy as np, linattn, linattn.torch; x = np.ones((1, 3, 1, 2), np.float32); "
            "print(linattn.__file__); print(linattn.softmax_attention(x, x, x).sum())")
    env = dict(os.environ, PYTHONPATH=str(site))
    result = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True,
                            cwd=tmp_path)
    file, total = result.stdout.split()
    assert pathlib.Path(file).resolve().is_relative_to(site.resolve())
    assert float(total) == 6.0
