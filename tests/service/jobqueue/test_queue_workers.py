"""Jobs on the real queue: an API server with OPTU_QUEUE_URL on the machine's Redis and real
`optu worker` processes. A worker killed mid-job loses nothing (another finishes the job with the
same result), a job that kills its worker twice fails with the reason, and a cancelled job's
search stops and frees its worker."""
from __future__ import annotations

import signal
import subprocess
from contextlib import ExitStack

import httpx
import pytest
import redis
from polling import poll_until
from prometheus_text import sample
from wire_examples import VALIDATED, sum_program

from service.http.devserver import running_server, start_workers
from service.jobqueue.broker import JobKeys
from service.optimizer import pipeline

VISIBILITY_S = "4"  # a lost worker's job runs again after seconds, not the default half minute
FINISHED = {"succeeded", "failed", "cancelled"}
# Deterministic and several seconds long (its iteration limit ends it, not its time limit), so a
# worker can be killed while it runs and the rerun must reproduce the same program.
STEADY = {"time_limit_s": 60, "iter_limit": 3, "node_limit": 200_000}
# runs until stopped: the exact extraction of a long sum proves nothing in 40 s
LONG = {"time_limit_s": 40, "iter_limit": 100, "node_limit": 200_000, "extraction": "ilp"}


def returned(estimate: dict) -> dict:
    """An estimate's figures for the returned program (its lower bound also floors the searched one)."""
    return {k: v for k, v in estimate.items() if k not in ("lower_bound", "optimized_over_bound")}


def queue_env(queue_url: str, tmp_path) -> dict[str, str]:
    return {"OPTU_QUEUE_URL": queue_url, "OPTU_QUEUE_VISIBILITY_TIMEOUT_S": VISIBILITY_S, "OPTU_WORKERS": "0",
            "OPTU_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}  # heartbeat files stay here


class Workers:
    """`optu worker` processes started by a test and killed at its end."""

    def __init__(self, queue_url: str, env: dict[str, str], stack: ExitStack):
        self.redis = redis.Redis.from_url(queue_url, decode_responses=True)
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}
        stack.callback(self.kill_all)

    def start(self, *names: str) -> None:
        self.procs.update(zip(names, start_workers(list(names), self.env)))

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()

    def running(self, job_id: str) -> str:
        """The worker running the job: once it is running, its record names the worker."""
        return poll_until(lambda: self.redis.hget(JobKeys(job_id).record, "worker"), bool)


@pytest.fixture
def queue(queue_url, tmp_path):
    with ExitStack() as stack:
        env = queue_env(queue_url, tmp_path)
        url, _ = stack.enter_context(running_server(env))
        yield httpx.Client(base_url=url, timeout=30), Workers(queue_url, env, stack)


def submit(api: httpx.Client, program: dict, options: dict) -> str:
    answer = api.post("/v1/jobs", json={"program": program, "options": options})
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def wait(api: httpx.Client, job_id: str, states: set[str]) -> dict:
    return poll_until(lambda: api.get(f"/v1/jobs/{job_id}").json(), lambda s: s["state"] in states)


def test_a_worker_killed_mid_job_loses_nothing_another_finishes_it_with_the_same_result(queue):
    api, workers = queue
    workers.start("first", "second")
    program = sum_program(120, 24)
    job_id = submit(api, program, STEADY)
    running = wait(api, job_id, {"running"} | FINISHED)
    assert running["state"] == "running", running
    victim = workers.running(job_id)
    workers.kill(victim)  # SIGKILL: it acknowledges nothing and says goodbye to no one
    done = wait(api, job_id, FINISHED)
    assert done["state"] == "succeeded", done
    record = workers.redis.hgetall(JobKeys(job_id).record)
    assert record["worker"] != victim and record["attempts"] == "2"
    result = api.get(f"/v1/jobs/{job_id}/result").json()
    assert result["id"] == job_id and result["validation"]["status"] in VALIDATED
    alone = pipeline.optimize(program, None, STEADY)  # what an uninterrupted run computes
    # the returned program's estimates and kernels; not its lower bound, which also floors the
    # searched candidate, and the algebra's exact extraction of a long sum stops at its time cap
    assert [returned(result["estimate"]), result["kernels"]] == [returned(alone["estimate"]), alone["kernels"]]
    assert [result["program"][k] for k in ("eqns", "outputs")] == [alone["program"][k] for k in ("eqns", "outputs")]
    # the same request is the same job, answered at once
    again = api.post("/v1/jobs", json={"program": program, "options": STEADY}).json()
    assert again["id"] == job_id and again["state"] == "succeeded"
    metrics = poll_until(lambda: api.get("/metrics").text, lambda text: sample(text, "optu_workers") == 1)
    assert sample(metrics, "optu_job_redeliveries_total") == 1
    assert sample(metrics, "optu_job_duration_seconds_count", state="succeeded") == 1


def test_a_job_whose_worker_dies_twice_fails_with_the_reason_instead_of_looping(queue):
    api, workers = queue
    workers.start("one", "two")
    job_id = submit(api, sum_program(200, 40), LONG)
    first = workers.running(job_id)
    workers.kill(first)
    second = poll_until(lambda: workers.redis.hget(JobKeys(job_id).record, "worker"), lambda w: w != first)
    poll_until(lambda: api.get(f"/v1/jobs/{job_id}").json()["progress"]["stage"], bool)
    workers.kill(second)
    workers.start("three")  # the job reaches it a third time, and it refuses to run it again
    failed = wait(api, job_id, FINISHED)
    assert failed["state"] == "failed" and "died 2 times" in failed["error"], failed
    assert api.get(f"/v1/jobs/{job_id}/result").status_code == 409
    quick = submit(api, sum_program(8, 40), STEADY)  # the third worker is fine and serves on
    assert wait(api, quick, FINISHED)["state"] == "succeeded"


def test_cancelling_a_running_job_stops_its_search_and_frees_its_worker(queue):
    api, workers = queue
    workers.start("left", "right")
    doomed, busy = submit(api, sum_program(200, 48), LONG), submit(api, sum_program(200, 56), LONG)
    freed = workers.running(doomed)
    assert workers.running(busy) != freed
    cancelled = api.delete(f"/v1/jobs/{doomed}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert api.delete(f"/v1/jobs/{doomed}").status_code == 409
    quick = submit(api, sum_program(8, 48), STEADY)
    assert wait(api, quick, FINISHED)["state"] == "succeeded"
    # the other worker is still on its long job, so the cancelled search's worker ran this one
    assert workers.redis.hget(JobKeys(quick).record, "worker") == freed
    assert api.get(f"/v1/jobs/{busy}").json()["state"] == "running"
    assert api.delete(f"/v1/jobs/{busy}").status_code == 200
