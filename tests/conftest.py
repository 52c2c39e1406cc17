"""Test tiers. `integration`: a test that runs the real server, worker processes, Redis or any
other subprocess (asked for by fixture, or marked). `slow`: in-process but long (whole models
through the pipeline, hypothesis over the rules). Everything else is `unit`, and a unit test is
held to it: starting a subprocess there fails the test.

`make test` runs the suite on two pytest-xdist processes: each has Redis databases and a result
cache directory of its own, and the container tests all run on one of them (one image build).
Under CI a skip is a failure."""
from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import tempfile

import pytest
import redis

# Fixtures that start a server, worker processes or Redis: a test using one is an integration test.
INTEGRATION_FIXTURES = frozenset({"server_url", "pool_server", "redis_url", "queue_url"})
# The machine's Redis (.ci/run starts one if none answers): the cache tests and the job queue's
# tests each on a database of their own.
TEST_REDIS = os.environ.get("OPTU_TEST_REDIS", "redis://127.0.0.1:6379")
# This test process's place among pytest-xdist's workers (0 when run alone): two databases each,
# counting down from 15 (the deployment tests use 5 and 4).
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
# Servers the tests start (and Settings made without a cache_dir) cache results here, not in the
# checkout, and apart from the other test process's.
os.environ.setdefault("OPTU_CACHE_DIR", tempfile.mkdtemp(prefix="optu-test-cache-"))
# Their workers start without the warm-up optimization, so they are ready in seconds however loaded
# the machine is (the warm-up has tests of its own: tests/service/optimizer/test_warm_up.py).
os.environ.setdefault("OPTU_WARM_UP", "false")


# Under CI (.ci/run exports CI=true) nothing may skip: a test that cannot run there fails, saying why.
IN_CI = os.environ.get("CI") == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome, report.longrepr = "failed", f"skipped under CI=true, where nothing may skip: {reason}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("container"):  # a container is a subprocess and a server
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.xdist_group("container"))
        if not any(item.get_closest_marker(tier) for tier in ("integration", "slow")):
            item.add_marker(pytest.mark.unit)


class SubprocessInUnitTest(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(*args, **kwargs):
        raise SubprocessInUnitTest(f"{request.node.nodeid} is a unit test but started a process; "
                                   "mark it integration")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)


def _empty_redis_database(url: str):
    """The machine's Redis database at `url`, emptied before and after; no answer fails the test."""
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        client.ping()
    except redis.ConnectionError as err:
        pytest.fail(f"no Redis answers at {url} ({err}); start redis-server (.ci/run does)")
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture(scope="module")
def redis_url():
    yield from _empty_redis_database(f"{TEST_REDIS}/{15 - 2 * WORKER}")


@pytest.fixture
def queue_url():
    yield from _empty_redis_database(f"{TEST_REDIS}/{14 - 2 * WORKER}")
