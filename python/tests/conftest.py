"""Fixtures of the Python tests; the helpers are in linattn_test_support.py."""

import pytest

from linattn_test_support import load_seed


@pytest.fixture(scope="session")
def seed():
    """The seed's own standard_attention and linear_attention, executed from the seed note."""
    return load_seed()
