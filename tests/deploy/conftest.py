"""Fixtures of the deployment tests: the image, built once per session from the working tree."""
from __future__ import annotations

import pytest
from docker_engine import build_image, engine_or_skip


@pytest.fixture(scope="session")
def image() -> str:
    engine_or_skip()
    return build_image()
