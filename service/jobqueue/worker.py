"""The `optu worker` process: a Celery consumer taking one job at a time from the queue and running
it in a warm child process. The child can be killed, so a cancelled job stops at once and a job
past its deadline answers the original program, as in the API's own pool; a program that crashes
the child is run again, like a job whose whole worker died, and fails after MAX_ATTEMPTS.

A heartbeat thread keeps the worker's presence key and its job's lease fresh and watches for the
job's cancellation; when the worker dies, both lapse and the queue redelivers the job."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
from celery import Task
from celery.exceptions import Ignore

from costmodel.profile import resolve_profile
from service.jobqueue.broker import (ACTIVE, HEARTBEAT_FILE, MAX_ATTEMPTS, QUEUE, REDELIVERIES, TASK, WORKER_PREFIX,
                                     JobKeys, Timing, beat, queue_app)
from service.jobqueue.pool import Cancelled, Ticket, WorkerDied, WorkerProcess, answer
from service.optimizer.options import OptimizeOptions, OptionsJSON
from service.optimizer.progress import Progress
from validation.response_json import ResponseJSON
from wire.json_types import Program

log = logging.getLogger("optu.worker")

TICK_S = 0.5  # how often the heartbeat looks for a cancellation of the running job
PROGRESS_EVERY_S = 0.25  # progress is written to the result backend at most this often (stages always)
READY_TIMEOUT_S = 120.0


class WorkerLost(RuntimeError):
    """The job's worker died MAX_ATTEMPTS times while running it: the job fails, not loops."""


class JobFailed(RuntimeError):
    """What the optimization raised, as text: the result backend keeps a message, not the object."""


@dataclass
class _Running:
    keys: JobKeys
    lease: Any  # redis.lock.Lock, held while the job runs here
    ticket: Ticket


class QueueWorker:
    """One consumer of the job queue at `url` and the warm child process its jobs run in."""

    def __init__(self, url: str, timing: Timing, result_ttl_s: float, deadline_grace_s: float, name: str,
                 warm_up: bool = True):
        self.app = queue_app(url, timing, result_ttl_s)
        self.redis = redis.Redis.from_url(url, decode_responses=True)
        self.timing, self.result_ttl_s, self.deadline_grace_s, self.name = timing, result_ttl_s, deadline_grace_s, name
        self.warm_up = warm_up
        self._child: WorkerProcess | None = None
        self._running: _Running | None = None
        self._stopped = threading.Event()

        def optimize_job(task: Task, *message: Any) -> ResponseJSON:  # bound: Celery passes the task
            return self._optimize_job(task, *message)

        self.app.task(name=TASK, bind=True)(optimize_job)

    def serve(self, loglevel: str = "INFO") -> int:
        """Start the child, then consume jobs until a signal stops the worker; its exit status."""
        self._child = self._fresh_child()
        beat = threading.Thread(target=self._heartbeat, name="optu-heartbeat", daemon=True)
        beat.start()
        try:
            consumer = self.app.Worker(pool_cls="solo", concurrency=1, hostname=self.name, queues=[QUEUE],
                                       without_gossip=True, without_mingle=True, without_heartbeat=True,
                                       loglevel=loglevel)
            consumer.start()
            return consumer.exitcode or 0
        finally:
            self._stopped.set()
            self.redis.delete(WORKER_PREFIX + self.name)
            HEARTBEAT_FILE.unlink(missing_ok=True)
            self._child.stop()

    # -- one job -------------------------------------------------------------------------------
    def _optimize_job(self, task: Task, job_id: str, run: str, program: Program, hardware: Any,
                      options: OptionsJSON) -> ResponseJSON:
        keys = JobKeys(job_id)
        record = self.redis.hgetall(keys.record)
        if record.get("run") != run or record.get("cancelled") or task.AsyncResult(job_id).ready():
            raise Ignore()  # superseded by a later submission, forgotten, cancelled, or a copy of a finished job
        lease = self.redis.lock(keys.lease, timeout=self.timing.lease_s, blocking=False, thread_local=False)
        if not lease.acquire():  # delivered again while the worker that has it still runs it: look later
            task.apply_async(task.request.args, task_id=job_id, countdown=self.timing.lease_s)
            raise Ignore()
        try:
            attempts = self.redis.hincrby(keys.record, "attempts", 1)
            if attempts > 1:
                self.redis.incr(REDELIVERIES)
            if attempts > MAX_ATTEMPTS:
                self._end(keys)
                raise WorkerLost(f"the job's worker died {attempts - 1} times while running it (killed, or the "
                                 f"program crashed it); the job is not run again")
            self.redis.hset(keys.record, mapping={"started": time.time(), "worker": self.name})
            try:
                response = self._run(task, _Running(keys, lease, Ticket()), program, hardware, options)
            except Cancelled:
                self._end(keys)
                raise Ignore() from None  # the record says cancelled; the API answers from it
            except WorkerDied:  # the program crashed the child: another attempt, counted like a lost worker
                raise task.retry(countdown=0, max_retries=None) from None
            except Exception as exc:
                self._end(keys)
                raise JobFailed(f"{type(exc).__name__}: {exc}") from None
            self._end(keys)
            return response
        finally:
            _release(lease)

    def _run(self, task: Task, running: _Running, program: Program, hardware: Any,
             options: OptionsJSON) -> ResponseJSON:
        request = (program, resolve_profile(hardware), OptimizeOptions.coerce(options).resolved())  # parsed once, here
        deadline_s = request[2].time_limit_s + self.deadline_grace_s
        self._running = running
        try:
            kind, value = running.ticket.exchange(self._child, request, deadline_s, _progress_writer(task))
        finally:
            self._running = None
            if not self._child.alive():  # killed by cancel or deadline, or crashed
                self._child.kill()
                self._child = self._fresh_child()
        if running.ticket.cancelled:
            raise Cancelled("cancelled while running; its search was stopped")
        return answer(kind, value, request, self.deadline_grace_s)

    def _end(self, keys: JobKeys) -> None:
        with self.redis.pipeline() as pipe:
            pipe.hset(keys.record, "finished", time.time()).expire(keys.record, int(self.result_ttl_s))
            pipe.zrem(ACTIVE, keys.job_id).execute()

    def _fresh_child(self) -> WorkerProcess:
        child = WorkerProcess(warm_up=self.warm_up)
        if not child.wait_ready(READY_TIMEOUT_S):
            child.kill()
            raise RuntimeError("the worker's child process did not start")
        return child

    # -- heartbeat -----------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        """Keep the presence key and the running job's lease fresh; stop a cancelled job's search."""
        last_beat = 0.0
        while not self._stopped.wait(TICK_S):
            running = self._running
            try:
                if running is not None and self.redis.hget(running.keys.record, "cancelled"):
                    running.ticket.cancel()  # kills the child: the search stops now
                if time.monotonic() - last_beat >= self.timing.heartbeat_s:
                    last_beat = time.monotonic()
                    self.redis.set(WORKER_PREFIX + self.name, running.keys.job_id if running else "",
                                   ex=max(1, round(self.timing.lease_s)))
                    beat()  # healthy: alive and reaching the broker
                    if running is not None:
                        running.lease.reacquire()
            except Exception:  # Redis away for a moment: the next tick tries again
                log.warning("heartbeat failed", exc_info=True)


def _progress_writer(task: Task):
    """A progress listener that writes the job's state (PROGRESS, with the facts so far) to the
    result backend, at most every PROGRESS_EVERY_S unless the stage changes."""
    facts: dict[str, float | int | str] = {"started": time.time()}  # the progress so far, and when it began
    written = [0.0]

    def on_progress(new: Progress) -> None:
        facts.update(new)
        if "stage" in new or time.monotonic() - written[0] >= PROGRESS_EVERY_S:
            written[0] = time.monotonic()
            task.update_state(state="PROGRESS", meta=dict(facts))

    return on_progress


def _release(lease) -> None:
    try:
        lease.release()
    except Exception:  # lapsed meanwhile (Redis away): it expires on its own
        pass
