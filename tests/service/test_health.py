"""The image's health probe: a worker is healthy while its heartbeat is fresh, an API while it
answers /healthz, and nothing listening is unhealthy."""
from __future__ import annotations

import os
import time

import pytest

from service import health
from service.http.devserver import free_port
from service.http.settings import Settings
from service.jobqueue import broker


@pytest.fixture
def heartbeat(tmp_path, monkeypatch):
    path = tmp_path / "optu-worker.heartbeat"
    monkeypatch.setattr(broker, "HEARTBEAT_FILE", path)
    return path


def test_a_worker_is_healthy_while_its_heartbeat_is_fresh(heartbeat):
    settings = Settings(queue_visibility_timeout_s=30)  # heartbeat every 5 s: stale after 15 s
    broker.beat()  # this process stands for the worker
    assert health.healthy(settings)
    stale = time.time() - 16
    os.utime(heartbeat, (stale, stale))
    assert not health.healthy(settings)


def test_without_a_worker_the_probe_asks_the_api_and_nothing_listening_is_unhealthy(heartbeat):
    assert not health.healthy(Settings(host="0.0.0.0", port=free_port()))


def test_the_heartbeat_of_a_worker_that_is_gone_is_ignored(heartbeat):
    heartbeat.write_text("999999999")  # no such process: a worker killed outright leaves its file
    assert broker.heartbeat_age_s() is None
    heartbeat.write_text("not a pid")
    assert broker.heartbeat_age_s() is None
