"""Jobs embedded in the API process, run by its own worker pool (or a thread): a job's id is its
request's id, so the same request names the same job and a result already cached finishes its job
at once; finished jobs are forgotten after a TTL (their results stay in the result cache)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from costmodel.profile import HardwareProfile
from service.jobqueue.pool import Cancelled, Ticket
from service.jobqueue.states import (CANCELLED_BY_CLIENT, FINISHED, JobFinished, JobQueueFull, JobStatusJSON, NoResult,
                                     ResultCache, State, UnknownJob, job_status)
from service.optimizer.options import OptimizeOptions
from service.optimizer.progress import Listener, Progress
from validation.response_json import ResponseJSON
from wire.json_types import Program

# (program, hardware, options, on_progress, ticket) -> the response
Runner = Callable[[Program, str | HardwareProfile, OptimizeOptions, Listener, Ticket], Awaitable[ResponseJSON]]


@dataclass
class Job:
    id: str
    state: State = "queued"
    submitted_s: float = field(default_factory=time.monotonic)
    started_s: float | None = None
    finished_s: float | None = None
    progress: Progress = field(default_factory=Progress)
    result: ResponseJSON | None = None
    error: Any = None
    ticket: Ticket = field(default_factory=Ticket)

    def start(self) -> None:
        if self.state == "queued":
            self.state, self.started_s = "running", time.monotonic()

    def finish(self, state: State, result: ResponseJSON | None = None, error: Any = None) -> None:
        self.state, self.result, self.error, self.finished_s = state, result, error, time.monotonic()

    def status(self) -> JobStatusJSON:
        """Its status; elapsed_s counts from when a worker took the job."""
        end = self.finished_s if self.finished_s is not None else time.monotonic()
        return job_status(self.id, self.state, self.progress,
                          0.0 if self.started_s is None else end - self.started_s, self.error)


class JobStore:
    """The jobs of one API process, run by its own worker pool. Use from its event loop. The queue's
    store (service/jobqueue/queue_store.py) answers the same calls for jobs on a shared queue."""

    def __init__(self, run: Runner, cache: ResultCache, depth: int, ttl_s: float, workers_up: Callable[[], int],
                 describe_failure: Callable[[Exception], Any], on_finish: Callable[[str, float], None] | None = None):
        self._run, self._cache, self.depth, self.ttl_s, self._on_finish = run, cache, depth, ttl_s, on_finish
        self._workers_up, self._describe_failure = workers_up, describe_failure
        self._jobs: dict[str, Job] = {}
        self._tasks: set[asyncio.Task] = set()

    def _get(self, job_id: str) -> Job:
        self._forget_expired()
        if job_id not in self._jobs:
            raise UnknownJob(job_id)
        return self._jobs[job_id]

    async def status(self, job_id: str) -> JobStatusJSON:
        return self._get(job_id).status()

    async def result(self, job_id: str) -> ResponseJSON:
        job = self._get(job_id)
        if job.state != "succeeded" or job.result is None:  # a job that succeeded has its result
            raise NoResult(job.status())
        return job.result

    def workers_up(self) -> int:
        return self._workers_up()

    def redeliveries(self) -> int:
        return 0  # a job here dies with its server; nothing delivers it again

    def unready_reason(self) -> str | None:
        return None  # jobs run where the requests do: the pool's readiness says it all

    def active(self) -> int:
        return sum(job.state not in FINISHED for job in self._jobs.values())

    def count(self, state: State) -> int:
        """Jobs in `state` now (read at each metrics scrape)."""
        return sum(job.state == state for job in self._jobs.values())

    async def submit(self, key: str, program: Program, hardware: str | HardwareProfile,
                     options: OptimizeOptions) -> JobStatusJSON:
        """The status of request `key`'s job: the one already known (unless it failed or was
        cancelled), one finished at once from the cache, or a new one, queued."""
        self._forget_expired()
        known = self._jobs.get(key)
        if known is not None and known.state not in ("failed", "cancelled"):
            return known.status()
        job = self._jobs[key] = Job(key)  # before any await: a second submit of it finds this job
        if (hit := await asyncio.to_thread(self._cache.get, key)) is not None:
            job.start()
            job.finish("succeeded", hit)
            return job.status()
        if self.active() > self.depth:  # this job counts: one more than the depth is refused
            self._jobs.pop(key)
            if known is not None:
                self._jobs[key] = known
            raise JobQueueFull(self.depth, retry_after_s=max(1, round(options.time_limit_s or 0)))
        task = asyncio.get_running_loop().create_task(self._execute(job, program, hardware, options))
        self._tasks.add(task)  # a strong reference until it ends
        task.add_done_callback(self._tasks.discard)
        return job.status()

    async def cancel(self, job_id: str) -> JobStatusJSON:
        job = self._get(job_id)
        if job.state in FINISHED:
            raise JobFinished(f"job {job_id!r} has already finished ({job.state})")
        self._finish(job, "cancelled", error=CANCELLED_BY_CLIENT)
        await asyncio.to_thread(job.ticket.cancel)  # kills the worker serving it, if any
        return job.status()

    async def _execute(self, job: Job, program: Program, hardware: str | HardwareProfile,
                       options: OptimizeOptions) -> None:
        loop = asyncio.get_running_loop()

        def on_progress(facts: Progress) -> None:  # from a pool thread: hand it to the loop
            loop.call_soon_threadsafe(_record, job, facts)

        job.ticket.on_start = job.start
        try:
            result = await self._run(program, hardware, options, on_progress, job.ticket)
        except Cancelled:
            return  # already marked cancelled by `cancel`
        except Exception as exc:  # the request was checked at submit: what is left is the server's
            self._finish(job, "failed", error=self._describe_failure(exc))
            return
        if job.state == "cancelled":
            return
        self._finish(job, "succeeded", await asyncio.to_thread(self._cache.put, job.id, result))

    async def close(self) -> None:
        """Cancel the jobs still running and wait for their runs to end (without a pool, a cancelled
        search ends after its current step): a thread torn down mid-search at exit aborts Python."""
        for job in self._jobs.values():
            if job.state not in FINISHED:
                self._finish(job, "cancelled", error="the server is stopping")
                await asyncio.to_thread(job.ticket.cancel)
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _finish(self, job: Job, state: State, result: ResponseJSON | None = None, error: Any = None) -> None:
        job.finish(state, result, error)
        if self._on_finish is not None and job.finished_s is not None:
            self._on_finish(state, job.finished_s - job.submitted_s)

    def _forget_expired(self) -> None:
        now = time.monotonic()
        for key in [k for k, j in self._jobs.items() if j.finished_s is not None and now - j.finished_s > self.ttl_s]:
            del self._jobs[key]


def _record(job: Job, facts: Progress) -> None:
    if job.state in FINISHED:
        return
    job.start()
    job.progress = {**job.progress, **facts}
