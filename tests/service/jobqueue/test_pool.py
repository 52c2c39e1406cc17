"""The worker pool through a real server (uvicorn on a loopback port, 2 workers, queue depth 2,
1 s deadline grace): the event loop stays responsive while every worker is busy, a full queue
answers 503 + Retry-After, a deadline answers 200 with the original program, a worker killed from
outside costs only its own request, and oversized tensors are refused before any work."""
from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from polling import poll_until
from wire_examples import VALIDATED, sum_program

from service.http.devserver import running_server

pytestmark = pytest.mark.integration  # a real server or subprocess

GRACE_S = 1.0
MAX_ELEMENTS = 100_000


def slow_request(width: int, time_limit_s: float) -> dict:
    return {"program": sum_program(400, width),
            "options": {"iter_limit": 100, "node_limit": 10**6, "time_limit_s": time_limit_s, "extraction": "ilp"}}


def tiny_request(width: int) -> dict:
    return {"program": sum_program(2, width), "options": {"time_limit_s": 5}}


@pytest.fixture(scope="module")
def pool_server(tmp_path_factory):
    """(url, server process) with a worker pool; waits until /readyz says the workers are up."""
    settings = {"OPTU_WORKERS": "2", "OPTU_QUEUE_DEPTH": "2", "OPTU_DEADLINE_GRACE_S": str(GRACE_S),
                "OPTU_MAX_TENSOR_ELEMENTS": str(MAX_ELEMENTS), "OPTU_LOG_LEVEL": "WARNING",
                "OPTU_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    # the server and two spawned workers each import JAX
    with running_server(settings, ready_path="/readyz", drop=("OPTU_API_TOKEN",)) as server:
        yield server


def wait_for(url: str, predicate, timeout_s: float) -> dict:
    """Poll /readyz's worker status until `predicate` holds; fail after `timeout_s`."""
    return poll_until(lambda: httpx.get(url + "/readyz", timeout=2).json().get("workers", {}), predicate, timeout_s)


def job_status(url: str, job: dict) -> dict:
    return httpx.get(url + job["status_url"], timeout=10).json()


def worker_pids(server_pid: int) -> list[int]:
    """The server's spawned worker processes, read from /proc (the resource tracker excluded)."""
    children: list[int] = []
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        children += [int(p) for p in (task / "children").read_text().split()]
    return [p for p in children if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]


def post(url: str, body: dict, timeout_s: float = 60) -> httpx.Response:
    return httpx.post(url + "/v1/optimize", json=body, timeout=timeout_s)


def test_tensor_over_the_element_limit_is_refused_naming_it(pool_server):
    url, _ = pool_server
    program = sum_program(2, 8)
    program["inputs"][1] = {"name": "huge", "shape": [1000, 1000], "dtype": "float32"}
    r = post(url, {"program": program})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail["field"] == "inputs[1]" and "'huge'" in detail["message"]
    assert str(MAX_ELEMENTS) in detail["message"]


def test_busy_workers_leave_health_responsive_and_a_full_queue_answers_503(pool_server):
    url, proc = pool_server
    # every worker up first: each warms up (a whole optimization, validation included) before it counts
    before = wait_for(url, lambda s: s.get("workers") == 2 and s.get("busy") == 0, timeout_s=120)
    with ThreadPoolExecutor(5) as threads:
        running = [threads.submit(post, url, slow_request(100 + i, time_limit_s=60)) for i in range(2)]
        wait_for(url, lambda s: s.get("busy") == 2, timeout_s=60)
        # Held busy by SIGSTOP, not by the work's length: the state below lasts until this test ends
        # it, however loaded the machine, and stopped workers leave the server the CPU it needs to
        # queue the next requests (work held busy by its length can reach its deadline first).
        busy_pids = worker_pids(proc.pid)
        for pid in busy_pids:
            os.kill(pid, signal.SIGSTOP)
        queued = [threads.submit(post, url, tiny_request(200 + i)) for i in range(2)]
        wait_for(url, lambda s: s.get("busy") == 2 and s.get("queued") == 2, timeout_s=60)
        with httpx.Client(base_url=url, timeout=60) as client:
            assert all(client.get("/healthz").status_code == 200 for _ in range(10))
        full = post(url, tiny_request(300))
        assert full.status_code == 503, full.text
        assert int(full.headers["Retry-After"]) >= 1
        # Killing the stopped workers costs their own requests a 503 (retry) and no more: the
        # queued requests are served by the fresh workers that replace them.
        for pid in busy_pids:
            os.kill(pid, signal.SIGKILL)
        died = [f.result(timeout=120) for f in running]
        served = [f.result(timeout=180) for f in queued]
    assert [r.status_code for r in died] == [503, 503], [r.text for r in died]
    assert all("died" in r.json()["detail"] for r in died)
    for r in served:
        assert r.status_code == 200, r.text
        assert r.json()["validation"]["status"] in ("passed", "identical")
    after = wait_for(url, lambda s: s.get("workers") == 2 and s.get("busy") == 0, timeout_s=120)
    assert after["restarts"] >= before["restarts"] + 2


def test_a_tiny_time_limit_on_long_work_answers_the_original_program_in_time(pool_server):
    url, _ = pool_server
    wait_for(url, lambda s: s.get("workers") == 2 and s.get("busy") == 0, timeout_s=120)
    body = slow_request(300, 0.1)
    r = post(url, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["report"]["egraph"]["stop_reason"] == "time_limit"
    assert out["program"]["eqns"] == body["program"]["eqns"]  # unchanged (inputs gain a default role)
    assert out["validation"]["status"] == "identical" and out["report"]["notes"]  # the original, as sent
    assert out["estimate"]["optimized"] == out["estimate"]["baseline"]


def test_a_worker_killed_mid_request_fails_only_that_request(pool_server):
    url, proc = pool_server
    before = wait_for(url, lambda s: s.get("workers") == 2 and s.get("busy") == 0, timeout_s=120)
    with ThreadPoolExecutor(1) as threads:
        victim = threads.submit(post, url, slow_request(400, 5.0))
        wait_for(url, lambda s: s.get("busy") == 1, timeout_s=10)
        pids = worker_pids(proc.pid)
        assert len(pids) == 2, pids
        for pid in pids:  # the busy one and the idle one: both must be replaced
            os.kill(pid, signal.SIGKILL)
        r = victim.result(timeout=30)
    assert r.status_code == 503, r.text
    assert "died" in r.json()["detail"] and int(r.headers["Retry-After"]) >= 1
    # answered when the worker died (503), not at the deadline (which answers 200 with the original)
    nxt = post(url, tiny_request(401))  # waits for a replacement worker, then succeeds
    assert nxt.status_code == 200, nxt.text
    assert nxt.json()["validation"]["status"] in VALIDATED
    after = wait_for(url, lambda s: s.get("workers") == 2, timeout_s=120)
    assert after["restarts"] >= before["restarts"] + 2
    assert set(worker_pids(proc.pid)).isdisjoint(pids)


def test_a_cancelled_job_stops_its_worker_and_a_later_job_is_served(pool_server):
    url, _ = pool_server
    before = wait_for(url, lambda s: s.get("workers") == 2 and s.get("busy") == 0, timeout_s=120)
    job = httpx.post(url + "/v1/jobs", json=slow_request(500, time_limit_s=60), timeout=60).json()
    poll_until(lambda: job_status(url, job), lambda s: s["state"] == "running" and s["progress"]["stage"] is not None)
    cancelled = httpx.delete(url + job["status_url"], timeout=60)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    # the search stopped with its worker, which was replaced
    after = wait_for(url, lambda s: s.get("workers") == 2 and s.get("busy") == 0, timeout_s=120)
    assert after["restarts"] == before["restarts"] + 1
    small = httpx.post(url + "/v1/jobs", json=tiny_request(501), timeout=60).json()
    status = poll_until(lambda: job_status(url, small), lambda s: s["state"] in ("succeeded", "failed", "cancelled"))
    assert status["state"] == "succeeded"
    assert httpx.get(url + small["result_url"], timeout=10).json()["validation"]["status"] in VALIDATED
