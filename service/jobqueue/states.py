"""What every job store says alike: a job's states, the status GET /v1/jobs/{id} answers, the
errors the job API turns into 4xx, and what a store needs of the result cache."""
from __future__ import annotations

from typing import Any, Callable, Literal, Protocol, TypedDict

from service.optimizer.progress import Progress
from validation.response_json import ResponseJSON

State = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
CANCELLED_BY_CLIENT = "cancelled by the client"


class JobProgressJSON(TypedDict):
    stage: str | None
    egraph_nodes: int | None
    best_estimate_s: float | None
    elapsed_s: float  # since a worker took the job


class JobStatusJSON(TypedDict):
    """What GET /v1/jobs/{id} answers."""

    id: str
    state: State
    progress: JobProgressJSON
    error: Any  # why it failed or was cancelled: a message or a 4xx's detail


# Called with a job's status as it changes (through a server), or with the stages' own reports (in-process).
StatusListener = Callable[[JobStatusJSON | Progress], None]


class JobQueueFull(Exception):
    """As many jobs are queued or running as the server takes: answer 429 + Retry-After."""

    def __init__(self, depth: int, retry_after_s: int):
        super().__init__(f"{depth} jobs are already queued or running; retry later")
        self.retry_after_s = retry_after_s


class UnknownJob(LookupError):
    def __init__(self, job_id: str):
        super().__init__(f"no job with id {job_id!r} (unknown, or finished longer ago than the job TTL)")


class JobFinished(Exception):
    """Cancelling a job that has already finished: answer 409."""


class NoResult(Exception):
    """The result of a job that has not succeeded (yet): answer 409 with its status."""

    def __init__(self, status: JobStatusJSON):
        super().__init__(f"job {status['id']!r} is {status['state']}; no result")
        self.status = status


def job_status(job_id: str, state: State, progress: Progress, elapsed_s: float, error: Any) -> JobStatusJSON:
    """What GET /v1/jobs/{id} answers, whichever store holds the job."""
    return {"id": job_id, "state": state, "error": error,
            "progress": {"stage": "done" if state == "succeeded" else progress.get("stage"),
                         "egraph_nodes": progress.get("egraph_nodes"),
                         "best_estimate_s": progress.get("best_estimate_s"), "elapsed_s": round(elapsed_s, 3)}}


class ResultCache(Protocol):
    """The service's result cache, by request id: a finished job's response is put there."""

    def get(self, key: str) -> ResponseJSON | None: ...

    def put(self, key: str, result: ResponseJSON) -> ResponseJSON: ...
