"""Fixtures for the service tests: the real app served by uvicorn in a subprocess."""
from __future__ import annotations

import pytest

from service.http.devserver import running_server


@pytest.fixture(scope="session")
def server_url():
    with running_server() as (url, _):
        yield url
