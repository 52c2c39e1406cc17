"""docker-compose as users run it, on a real engine: the user-facing file resolves, and with the
host-network override one API container and two worker containers come up healthy on the
machine's Redis, complete jobs, and lose none when a worker container is killed mid-job: the
job is finished by the other worker with the result an uninterrupted run gives."""
from __future__ import annotations

import os
import uuid

import httpx
import pytest
import redis
from docker_engine import docker, engine_or_skip, healthy, run
from polling import poll_until
from wire_examples import VALIDATED, sum_program

from service.http.devserver import free_port
from service.jobqueue.broker import JobKeys

pytestmark = pytest.mark.container

FILES = ("-f", "docker-compose.yml", "-f", "compose.host.yml")
SERVICES = {"queue": 1, "cache": 1, "api": 1, "worker": 2}  # on the host network: one API replica
# Several seconds long and ended by its iteration limit, so its rerun reproduces it exactly.
STEADY = {"time_limit_s": 60, "iter_limit": 3, "node_limit": 200_000}


def test_the_user_facing_compose_file_resolves():
    engine_or_skip()
    services = run("docker-compose", "-f", "docker-compose.yml", "config", "--services").stdout.split()
    assert sorted(services) == ["cache", "optu", "queue", "worker"]


@pytest.fixture
def deployment(image):
    """(api url, compose command, queue Redis) of the stack up on the host network."""
    project, port = f"optutest{uuid.uuid4().hex[:8]}", free_port()
    # below the test processes' own databases (tests/conftest.py)
    queue_url, cache_url = "redis://127.0.0.1:6379/5", "redis://127.0.0.1:6379/4"
    for url in (queue_url, cache_url):
        redis.Redis.from_url(url).flushdb()
    env = {**os.environ, "OPTU_IMAGE": image, "OPTU_PORT": str(port), "OPTU_HOST_QUEUE_URL": queue_url,
           "OPTU_HOST_CACHE_URL": cache_url, "OPTU_QUEUE_VISIBILITY_TIMEOUT_S": "6"}
    compose = ("docker-compose", "-p", project, *FILES)
    try:
        run(*compose, "up", "-d", "--no-build", "--scale", "worker=2", env=env, timeout=300)
        poll_until(lambda: _containers(compose, env), lambda found: _all_healthy(found))
        yield f"http://127.0.0.1:{port}", compose, env, redis.Redis.from_url(queue_url, decode_responses=True)
    finally:
        run(*compose, "down", "-v", "--timeout", "10", env=env, timeout=300, check=False)
        for url in (queue_url, cache_url):
            redis.Redis.from_url(url).flushdb()


def _containers(compose, env) -> dict[str, list[str]]:
    """Each service's containers."""
    return {service: run(*compose, "ps", "-q", service, env=env).stdout.split() for service in SERVICES}


def _all_healthy(containers: dict[str, list[str]]) -> bool:
    counts = {service: len(ids) for service, ids in containers.items()}
    return counts == SERVICES and all([healthy(c) for ids in containers.values() for c in ids])


def _job(api: httpx.Client, program: dict) -> str:
    answer = api.post("/v1/jobs", json={"program": program, "options": STEADY})
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def _finished(api: httpx.Client, job_id: str) -> dict:
    return poll_until(lambda: api.get(f"/v1/jobs/{job_id}").json(),
                      lambda s: s["state"] in ("succeeded", "failed", "cancelled"))


def test_compose_on_the_host_network_completes_jobs_and_a_killed_worker_container_loses_none(deployment):
    url, compose, env, queue = deployment
    api = httpx.Client(base_url=url, timeout=60)
    program = sum_program(120, 32)
    job_id = _job(api, program)
    worker_name = poll_until(lambda: queue.hget(JobKeys(job_id).record, "worker"), bool)
    containers = run(*compose, "ps", "-q", "worker", env=env).stdout.split()
    [victim] = [c for c in containers if worker_name in docker("logs", c).stdout + docker("logs", c).stderr]
    docker("kill", victim)  # SIGKILL to the worker container while its job runs
    done = _finished(api, job_id)
    assert done["state"] == "succeeded", done
    assert queue.hget(JobKeys(job_id).record, "worker") != worker_name
    first = api.get(f"/v1/jobs/{job_id}/result").json()
    assert first["validation"]["status"] in VALIDATED
    # The same request once more, uninterrupted, from a clean slate: the same program and estimate.
    queue.delete(JobKeys(job_id).record, f"celery-task-meta-{job_id}")
    redis.Redis.from_url(env["OPTU_HOST_CACHE_URL"]).delete(f"optu:result:{job_id}")
    assert _job(api, program) == job_id
    assert _finished(api, job_id)["state"] == "succeeded"
    second = api.get(f"/v1/jobs/{job_id}/result").json()
    # not the lower bound, which also floors the searched candidate (the algebra's exact extraction of
    # a long sum stops at its time cap)
    returned = lambda estimate: {k: v for k, v in estimate.items() if k not in ("lower_bound", "optimized_over_bound")}
    assert returned(second["estimate"]) == returned(first["estimate"]) and second["program"] == first["program"]
    assert _finished(api, _job(api, sum_program(6, 32)))["state"] == "succeeded"  # the stack still serves
