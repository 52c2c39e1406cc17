"""Checks that no rule test leaves 64-bit mode switched on for the tests after it."""
import jax
import pytest


@pytest.fixture(autouse=True)
def _x64_stays_scoped():
    before = jax.config.jax_enable_x64
    yield
    assert jax.config.jax_enable_x64 == before, "a test leaked jax_enable_x64"
