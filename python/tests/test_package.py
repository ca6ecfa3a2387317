"""The version is written once (CMakeLists.txt's project VERSION) and reported alike by the module,
the wheel's metadata and `linattn --version`; the package carries its licence."""

import importlib.metadata
import os
import pathlib
import re
import subprocess

import pytest

import linattn

REPO = pathlib.Path(__file__).resolve().parents[2]
CMAKE_VERSION = re.search(r"project\(linattn VERSION ([0-9]+\.[0-9]+\.[0-9]+)",
                          (REPO / "CMakeLists.txt").read_text()).group(1)


def test_module_version_is_the_cmake_project_version():
    assert linattn.__version__ == CMAKE_VERSION


def test_installed_metadata_has_the_same_version():
    try:
        installed = importlib.metadata.version("linattn")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("linattn is imported from a build tree, not installed by pip")
    assert installed == CMAKE_VERSION


def test_command_version_is_the_same():
    binary = os.environ.get("LINATTN_BIN") or str(REPO / "build" / "tools" / "linattn")
    if not pathlib.Path(binary).exists():
        pytest.skip(f"no linattn command at {binary}")
    result = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"linattn {CMAKE_VERSION}"


def test_licence_is_mit_and_named_in_pyproject():
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
    assert 'license = { file = "LICENSE" }' in (REPO / "pyproject.toml").read_text()
