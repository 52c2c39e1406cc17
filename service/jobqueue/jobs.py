"""Optimizations as jobs, through one door the HTTP layer imports: `open_jobs` gives the routes the
shared queue's jobs when a queue URL is set (Celery over Redis, run by `optu worker` processes
anywhere), else this process's own, run by its worker pool (`WorkerPool`, which also serves
/v1/optimize); both answer the calls of `Jobs`, so the routes cannot tell which one serves them."""
from __future__ import annotations

from typing import Any, Callable, Protocol

from costmodel.profile import HardwareProfile
from service.jobqueue.broker import Timing
from service.jobqueue.local_store import JobStore, Runner
from service.jobqueue.pool import Cancelled, QueueFull, Ticket, WorkerDied, WorkerPool
from service.jobqueue.queue_store import QueueJobStore
from service.jobqueue.states import JobFinished, JobQueueFull, JobStatusJSON, NoResult, ResultCache, State, UnknownJob
from service.optimizer.options import OptimizeOptions
from validation.response_json import ResponseJSON
from wire.json_types import Program

__all__ = ["Jobs", "open_jobs", "JobFinished", "JobQueueFull", "NoResult", "UnknownJob",
           "WorkerPool", "QueueFull", "WorkerDied", "Cancelled", "Ticket"]


class Jobs(Protocol):
    """Submit, poll, fetch and cancel jobs (from the app's event loop); counts for the metrics."""

    depth: int
    ttl_s: float

    async def submit(self, key: str, program: Program, hardware: str | HardwareProfile,
                     options: OptimizeOptions) -> JobStatusJSON: ...

    async def status(self, job_id: str) -> JobStatusJSON: ...

    async def result(self, job_id: str) -> ResponseJSON: ...

    async def cancel(self, job_id: str) -> JobStatusJSON: ...

    async def close(self) -> None: ...

    def unready_reason(self) -> str | None: ...

    def count(self, state: State) -> float: ...

    def workers_up(self) -> float: ...

    def redeliveries(self) -> float: ...


def open_jobs(cache: ResultCache, depth: int, ttl_s: float, *, queue_url: str | None, visibility_timeout_s: float,
              run: Runner, workers_up: Callable[[], int], describe_failure: Callable[[Exception], Any],
              on_finish: Callable[[str, float], None] | None = None) -> Jobs:
    """The queue's jobs at `queue_url`, or, without one, jobs run here by `run` (`workers_up`: the
    pool's live workers; `describe_failure`: what a failed job says of its exception). `on_finish`
    hears each job's end state and seconds from submit to end."""
    if queue_url:
        return QueueJobStore(queue_url, Timing(visibility_timeout_s), cache, depth, ttl_s, on_finish)
    return JobStore(run, cache, depth, ttl_s, workers_up, describe_failure, on_finish)
