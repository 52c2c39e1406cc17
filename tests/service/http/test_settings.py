"""The settings: every one documented in the deployment page's table, and URLs that are not Redis refused."""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.http.settings import Settings


def test_the_deployment_page_documents_every_setting():
    page = (Path(__file__).resolve().parents[3] / "docs" / "deployment.md").read_text()
    missing = [f"OPTU_{name.upper()}" for name in Settings.model_fields if f"`OPTU_{name.upper()}`" not in page]
    assert not missing, f"settings without a row in docs/deployment.md's settings table: {missing}"


@pytest.mark.parametrize("field", ["queue_url", "cache_url"])
def test_a_queue_or_cache_url_that_is_not_redis_is_refused_by_name(field):
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: "amqp://127.0.0.1:5672"})
    assert getattr(Settings(**{field: "redis://127.0.0.1:6379/3"}), field) == "redis://127.0.0.1:6379/3"
