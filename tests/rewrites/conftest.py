"""Makes `rule_harness` importable from the rule tests beside it, and checks that no test leaves
64-bit mode switched on for the tests after it."""
import pathlib
import sys

import jax
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))


@pytest.fixture(autouse=True)
def _x64_stays_scoped():
    before = jax.config.jax_enable_x64
    yield
    assert jax.config.jax_enable_x64 == before, "a test leaked jax_enable_x64"
