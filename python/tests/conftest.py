"""Fixtures of the Python tests; the helpers are in linattn_test_support.py."""

import pytest

from linattn_test_support import SEED_NOTE, load_seed


@pytest.fixture(scope="session")
def seed():
    """The seed's own standard_attention and linear_attention, executed from the seed note (the tests
    that compare with it skip, saying why, in a checkout without ../shared)."""
    if not SEED_NOTE.is_file():
        pytest.skip(f"the seed note {SEED_NOTE} is absent (../shared is not beside this checkout)")
    return load_seed()
