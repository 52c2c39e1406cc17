"""What the API and the workers agree on: the Celery app for a broker URL and the Redis keys that
describe a job beyond Celery's own task state (its submission, cancellation, attempts and lease).

Redelivery rests on Redis's visibility timeout: a message taken but not acknowledged within it is
delivered again. A worker holds a lease on the job it runs, refreshed while it lives, so a message
redelivered while its first worker is alive and still running is put off, not run twice; once the
lease has lapsed the job's worker is gone and the job runs again, at most MAX_ATTEMPTS times."""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from celery import Celery

QUEUE = "optu"
TASK = "optu.optimize"
MAX_ATTEMPTS = 2  # a job whose worker dies this many times ends failed instead of running again
ACTIVE = "optu:jobs:active"  # sorted set: jobs submitted and not yet finished, scored by submit time
REDELIVERIES = "optu:jobs:redeliveries"  # how many times a job ran again after its worker died
WORKER_PREFIX = "optu:worker:"  # one key per live worker, expiring unless the worker refreshes it
# Written by a worker (its pid) at each heartbeat that reached the broker; the container's health
# probe (service/health.py) reads its age.
HEARTBEAT_FILE = Path(tempfile.gettempdir()) / "optu-worker.heartbeat"


@dataclass(frozen=True)
class Timing:
    """The queue's clocks, all derived from the visibility timeout: a lease lapses well within it,
    so a redelivered message finds it gone; heartbeats refresh leases and worker keys thrice per
    lease; idle workers look for messages to redeliver several times per timeout."""

    visibility_timeout_s: float

    @property
    def lease_s(self) -> float:
        return self.visibility_timeout_s / 2

    @property
    def heartbeat_s(self) -> float:
        return self.lease_s / 3

    @property
    def restore_interval_s(self) -> int:
        return max(1, math.ceil(self.visibility_timeout_s / 6))


@dataclass(frozen=True)
class JobKeys:
    """The Redis keys of one job besides Celery's result."""

    job_id: str

    @property
    def record(self) -> str:
        """Hash: run (this submission's nonce), submitted/started/finished (epoch s), worker,
        attempts, cancelled (the reason), observed (a replica has counted its end)."""
        return f"optu:job:{self.job_id}"

    @property
    def lease(self) -> str:
        return f"optu:job:{self.job_id}:lease"


def beat() -> None:
    """Record that this process, a worker, is alive and reached the broker just now."""
    HEARTBEAT_FILE.write_text(str(os.getpid()))


def heartbeat_age_s() -> float | None:
    """Seconds since this machine's worker last beat; None when no worker runs here (no file, or
    the file of a worker that is gone: one killed outright cannot remove it)."""
    try:
        pid, age = int(HEARTBEAT_FILE.read_text()), time.time() - HEARTBEAT_FILE.stat().st_mtime
        os.kill(pid, 0)
    except (OSError, ValueError):  # no file, an unreadable one, or no such process
        return None
    return age


def queue_app(url: str, timing: Timing, result_ttl_s: float) -> Celery:
    """The Celery app on the Redis at `url` (broker and result backend): late acknowledgement, one
    job per worker at a time, JSON messages, results kept `result_ttl_s`."""
    app = Celery("optu", broker=url, backend=url, set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE, task_serializer="json", result_serializer="json", accept_content=["json"],
        task_acks_late=True,  # acknowledged when the job ends: a worker lost mid-job leaves it queued
        task_reject_on_worker_lost=True, worker_prefetch_multiplier=1, result_expires=int(result_ttl_s),
        broker_transport_options={"visibility_timeout": timing.visibility_timeout_s,
                                  "unacked_restore_interval": timing.restore_interval_s,
                                  "unacked_restore_throttle": 1},
        broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False)
    return app
