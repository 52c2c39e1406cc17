"""Jobs on the shared queue (OPTU_QUEUE_URL): sent through Celery over Redis to `optu worker`
processes on any machine, and answered by every API replica alike from Celery's task state and
the job's record in the same Redis. It answers the same calls as the embedded store
(service/jobqueue/local_store.py), so the routes cannot tell which one serves them."""
from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from typing import Callable

import redis

from costmodel.profile import HardwareProfile
from service.jobqueue.broker import ACTIVE, REDELIVERIES, TASK, WORKER_PREFIX, JobKeys, Timing, queue_app
from service.jobqueue.states import (CANCELLED_BY_CLIENT, FINISHED, JobFinished, JobQueueFull, JobStatusJSON, NoResult,
                                     ResultCache, State, UnknownJob, job_status)
from service.optimizer.options import OptimizeOptions
from validation.response_json import ResponseJSON
from wire.json_types import Program

log = logging.getLogger("optu.jobs")

REDIS_TIMEOUT_S = 5.0
# Celery's task states as the job API names them; a job whose worker died and that waits to run
# again reads as it last was (running) until a worker takes it.
_STATES: dict[str, State] = {"PENDING": "queued", "RETRY": "queued", "STARTED": "running", "PROGRESS": "running",
                             "SUCCESS": "succeeded", "FAILURE": "failed", "REVOKED": "cancelled"}


class QueueJobStore:
    """Jobs of every replica on the queue at `url`. Use from the app's event loop."""

    def __init__(self, url: str, timing: Timing, cache: ResultCache, depth: int, ttl_s: float,
                 on_finish: Callable[[str, float], None] | None = None):
        self.app = queue_app(url, timing, ttl_s)
        self.redis = redis.Redis.from_url(url, decode_responses=True, socket_timeout=REDIS_TIMEOUT_S,
                                          socket_connect_timeout=REDIS_TIMEOUT_S)
        self._cache, self.depth, self.ttl_s, self._on_finish = cache, depth, ttl_s, on_finish

    async def submit(self, key: str, program: Program, hardware: str | HardwareProfile,
                     options: OptimizeOptions) -> JobStatusJSON:
        return await asyncio.to_thread(self._submit, key, program, hardware, options)

    async def status(self, job_id: str) -> JobStatusJSON:
        return (await asyncio.to_thread(self._look, job_id))[0]

    async def result(self, job_id: str) -> ResponseJSON:
        status, result = await asyncio.to_thread(self._look, job_id)
        if status["state"] != "succeeded":
            raise NoResult(status)
        return result

    async def cancel(self, job_id: str) -> JobStatusJSON:
        return await asyncio.to_thread(self._cancel, job_id)

    async def close(self) -> None:
        """Jobs outlive this replica: they stay on the queue for the workers."""
        self.redis.close()

    def unready_reason(self) -> str | None:
        """Why jobs cannot be taken now (the queue's Redis does not answer), or None."""
        try:
            self.redis.ping()
            return None
        except redis.RedisError as exc:
            return f"the job queue (OPTU_QUEUE_URL) is unreachable: {type(exc).__name__}"

    # -- metrics, read at each scrape ----------------------------------------------------------
    def count(self, state: State) -> float:
        """Jobs queued (submitted, not finished, run by no worker now) or running (by a live worker)."""
        try:
            running = sum(bool(job) for job in self._workers().values())
            return running if state == "running" else max(0, self.redis.zcard(ACTIVE) - running)
        except redis.RedisError:
            return math.nan  # unknown, not zero

    def workers_up(self) -> float:
        try:
            return len(self._workers())
        except redis.RedisError:
            return math.nan

    def redeliveries(self) -> float:
        try:
            return int(self.redis.get(REDELIVERIES) or 0)
        except redis.RedisError:
            return math.nan

    # -- the work, on threads (blocking Redis calls) --------------------------------------------
    def _submit(self, key: str, program: Program, hardware: str | HardwareProfile,
                options: OptimizeOptions) -> JobStatusJSON:
        keys = JobKeys(key)
        if record := self.redis.hgetall(keys.record):
            known = self._status(key, record)[0]
            if known["state"] not in ("failed", "cancelled"):
                return known
        hit = self._cache.get(key)
        self.redis.zremrangebyscore(ACTIVE, 0, time.time() - self.ttl_s)  # jobs forgotten without an end
        if hit is None and self.redis.zcard(ACTIVE) >= self.depth:
            raise JobQueueFull(self.depth, retry_after_s=max(1, round(options.time_limit_s)))
        run, now = uuid.uuid4().hex, time.time()
        self.app.AsyncResult(key).forget()  # the state of an earlier run that failed or was cancelled
        with self.redis.pipeline() as pipe:
            pipe.delete(keys.record).hset(keys.record, mapping={"run": run, "submitted": now})
            if hit is not None:  # finished at once: the worker's result is already known
                pipe.hset(keys.record, mapping={"started": now, "finished": now, "observed": 1})
            else:
                pipe.zadd(ACTIVE, {key: now})
            pipe.expire(keys.record, int(self.ttl_s)).execute()
        if hit is not None:
            self.app.backend.store_result(key, hit, "SUCCESS")
        else:
            profile = hardware if isinstance(hardware, str) else hardware.model_dump(mode="json")
            self.app.send_task(
                TASK, args=[key, run, program, profile, options.model_dump(mode="json", by_alias=True)], task_id=key
            )
        return self._look(key)[0]

    def _look(self, job_id: str) -> tuple[JobStatusJSON, ResponseJSON | None]:
        return self._status(job_id, self.redis.hgetall(JobKeys(job_id).record))

    def _status(self, job_id: str, record: dict[str, str]) -> tuple[JobStatusJSON, ResponseJSON | None]:
        """The job's status and, once it succeeded, its response."""
        if not record:
            raise UnknownJob(job_id)
        meta = self.app.backend.get_task_meta(job_id)  # one read: Celery's state and its result or progress
        task_state, info = meta["status"], meta["result"]
        state: State = "cancelled" if record.get("cancelled") else _STATES.get(task_state, "queued")
        result = info if state == "succeeded" else None
        error = record.get("cancelled") or (f"{info}" if state == "failed" else None)
        progress = info if task_state == "PROGRESS" and isinstance(info, dict) else {}
        if result is not None:
            progress = {"egraph_nodes": result["report"]["egraph"].get("enodes"),
                        "best_estimate_s": result["estimate"]["optimized"]["time_s"]}
        started, finished = (float(record[k]) if k in record else None for k in ("started", "finished"))
        end = finished if state in FINISHED and finished is not None else time.time()
        if state in FINISHED:
            self._observe_end(job_id, state, record, end, result)
        return job_status(job_id, state, progress, 0.0 if started is None else max(0.0, end - started), error), result

    def _observe_end(self, job_id: str, state: State, record: dict[str, str], end: float,
                     result: ResponseJSON | None) -> None:
        """The first replica to see a job's end counts it (and caches its result)."""
        if record.get("observed") or not self.redis.hsetnx(JobKeys(job_id).record, "observed", 1):
            return
        if result is not None:
            self._cache.put(job_id, result)
        if self._on_finish is not None:
            self._on_finish(state, end - float(record["submitted"]))

    def _cancel(self, job_id: str) -> JobStatusJSON:
        keys = JobKeys(job_id)
        status = self._look(job_id)[0]
        if status["state"] in FINISHED:
            raise JobFinished(f"job {job_id!r} has already finished ({status['state']})")
        with self.redis.pipeline() as pipe:  # a worker running it stops its search within a heartbeat tick
            pipe.hset(keys.record, mapping={"cancelled": CANCELLED_BY_CLIENT, "finished": time.time()})
            pipe.zrem(ACTIVE, job_id).execute()
        return self._look(job_id)[0]

    def _workers(self) -> dict[str, str]:
        """Live workers by name, each with the id of the job it runs ('' when idle)."""
        names = list(self.redis.scan_iter(match=WORKER_PREFIX + "*", count=1000))
        return dict(zip(names, self.redis.mget(names))) if names else {}
