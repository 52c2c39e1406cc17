"""The worker pool: `pipeline.optimize` in warm worker processes, with per-request deadlines.

Saturation and extraction are CPU-bound Python and cannot be interrupted from outside a process,
so each request runs in a worker process that the pool SIGKILLs when the request passes its
deadline (time limit + grace); the request then answers 200 with the original program and
`stop_reason: "time_limit"`, and a fresh worker replaces the dead one. Workers are started with
the "spawn" context (JAX is not fork-safe) and stay warm: one imports JAX and the pipeline once
and serves requests one at a time over a pipe until the pool stops.

The event loop never waits on a pipe: each exchange with a worker runs on a pool-owned thread,
and at most `queue_depth` requests wait for a free worker (beyond that, `QueueFull`).
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Callable

from costmodel.profile import HardwareProfile
from service.optimizer import pipeline
from service.optimizer.options import OptimizeOptions
from service.optimizer.progress import Listener, listening
from service.optimizer.warm_up import settle_start_up_heap, warm_up
from validation.response_json import ResponseJSON
from wire.json_types import Program

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0  # a cold worker imports JAX; beyond this it is considered broken
RESPAWN_BACKOFF_S = 1.0  # between attempts when a worker cannot even start
STOP_GRACE_S = 5.0  # a stopping worker gets this long to exit before SIGKILL
PARENT_WATCH_S = 0.5  # how often a worker checks that its parent still lives


class Cancelled(Exception):
    """The request was cancelled (its ticket) before it finished; its worker, if any, was stopped."""


class Ticket:
    """A request's handle for cancelling it: queued, it never reaches a worker; running, the worker
    serving it is killed (and replaced), which stops the search at once."""

    def __init__(self) -> None:
        self.cancelled = False
        self.on_start: Callable[[], None] | None = None  # called when a worker takes the request
        self._worker: WorkerProcess | None = None  # set only while a worker runs this request
        self._lock = threading.Lock()

    def cancel(self) -> None:
        with self._lock:  # a worker that has answered is not this request's to kill any more
            self.cancelled = True
            if self._worker is not None:
                self._worker.kill()

    def exchange(
        self, worker: WorkerProcess, job: tuple, timeout_s: float, on_progress: Listener | None
    ) -> tuple[str, Any]:
        """`worker.exchange`, the worker killable through this ticket only while it runs."""
        with self._lock:
            if self.cancelled:  # before the job reached the worker, which stays healthy
                return "cancelled", None
            self._worker = worker
        try:
            return worker.exchange(job, timeout_s, on_progress)
        finally:
            with self._lock:
                self._worker = None


class QueueFull(Exception):
    """Every worker is busy and `queue_depth` requests already wait; answer 503 + Retry-After."""

    def __init__(self, queue_depth: int, retry_after_s: int):
        super().__init__(f"all workers are busy and {queue_depth} requests are already queued; retry later")
        self.retry_after_s = retry_after_s


class WorkerDied(Exception):
    """The worker serving a request died without answering (killed from outside, or crashed)."""

    retry_after_s = 1


def _portable(exc: Exception) -> Exception:
    """The exception itself if it survives pickling (WireError etc. keep their fields through
    __dict__), else a RuntimeError carrying its text, so the parent can always re-raise something."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _exit_with(parent_pid: int) -> None:
    """Exit as soon as the parent process is gone: a parent killed outright (SIGKILL) never tells
    its worker, which would otherwise search on for nobody until its request's end."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_WATCH_S)
    os._exit(1)


def _worker_main(conn, warm: bool = True) -> None:
    """Entry point of a worker process: serve jobs from `conn` until None or the pipe closes. A job
    carries everything the pipeline needs (options resolved by the app): workers read no settings.
    `warm`: run the warm-up optimization first."""
    # Ctrl-C in a terminal reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(os.getppid(),), name="optu-parent-watch", daemon=True).start()
    import jax

    jax.default_backend()  # initialise the backend now, not inside the first request's deadline
    warmed = False
    try:
        if warm:
            warm_up(pipeline.optimize)
            warmed = True
    except Exception:  # a cold worker still serves; the failure will show in its first request too
        log.exception("worker warm-up failed")
    settle_start_up_heap()
    conn.send(("ready", os.getpid(), warmed))
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the parent is gone
            return
        if job is None:
            return
        try:
            with listening(lambda facts: conn.send(("progress", facts))):
                reply: tuple[str, Any] = ("ok", pipeline.optimize(*job))
        except Exception as exc:  # shipped to the parent, which re-raises it for the error mapping
            reply = ("error", _portable(exc))
        try:
            conn.send(reply)
        except OSError:  # the parent is gone (a progress report may have found out first)
            return


class WorkerProcess:
    """One warm worker process and the parent's end of its pipe (spawned: JAX is not fork-safe)."""

    def __init__(self, ctx=None, warm_up: bool = True):
        ctx = ctx or multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        # daemon: multiprocessing kills the worker if the server exits without calling stop()
        self.process = ctx.Process(target=_worker_main, args=(child, warm_up), name="optu-worker", daemon=True)
        self.process.start()
        child.close()  # only the worker holds it now, so its death shows up as EOF here
        self.warmed = False

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether the worker came up within `timeout_s`; `warmed` then says if its warm-up ran."""
        try:
            if not self.conn.poll(timeout_s):
                return False
            kind, _, self.warmed = self.conn.recv()
            return kind == "ready"
        except (EOFError, OSError):
            return False

    def exchange(self, job: tuple, timeout_s: float, on_progress: Listener | None = None) -> tuple[str, Any]:
        """("ok", result) | ("error", exc) | ("deadline", None) | ("died", None), handing the
        worker's progress reports to `on_progress` meanwhile. Blocking."""
        deadline = time.monotonic() + timeout_s
        try:
            self.conn.send(job)
            while True:
                if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                    self.kill()
                    return "deadline", None
                kind, value = self.conn.recv()
                if kind != "progress":
                    return kind, value
                if on_progress is not None:
                    on_progress(value)
        except (EOFError, OSError):  # BrokenPipeError on send, EOF on recv: the worker is gone
            return "died", None

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        self.process.kill()
        self.process.join(STOP_GRACE_S)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(STOP_GRACE_S)
        if self.process.is_alive():
            self.kill()
        else:
            self.conn.close()


def answer(kind: str, value: Any, request: tuple, deadline_grace_s: float) -> ResponseJSON:
    """The response to a `WorkerProcess.exchange` of `request` = (program, hardware, options):
    its result, the error it raised, or at a deadline the original program; WorkerDied if the
    worker died without answering."""
    if kind == "ok":
        return value
    if kind == "error":
        raise value
    if kind == "deadline":
        program, hardware, options = request
        note = (f"the worker passed the request's deadline ({options.time_limit_s + deadline_grace_s:g} s = "
                f"time limit + {deadline_grace_s:g} s grace) and was stopped; returning the original program")
        return pipeline.original_response(program, hardware, options, note)
    raise WorkerDied("the worker serving this request died before answering; retry")


class WorkerPool:
    """`workers` warm worker processes behind a queue of at most `queue_depth` waiting requests; a
    request may run for its time limit + `deadline_grace_s`. Use from one event loop: `await
    start()` in the app lifespan, `await submit(...)` per request, `await stop()` at exit."""

    def __init__(self, workers: int, queue_depth: int, deadline_grace_s: float, warm_up: bool = True):
        self.workers, self.queue_depth, self.deadline_grace_s = workers, queue_depth, deadline_grace_s
        self.warm_up = warm_up
        self.restarts = 0  # workers replaced after a deadline kill or an unexpected death
        self._ctx = multiprocessing.get_context("spawn")
        # One thread per in-flight exchange and per worker being started: never more than this.
        self._threads = ThreadPoolExecutor(max_workers=2 * workers, thread_name_prefix="optu-pool")
        self._idle: asyncio.Queue[WorkerProcess] | None = None
        self._live: set[WorkerProcess] = set()
        self._starting: set[asyncio.Task] = set()
        self._waiting = 0
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Begin starting the workers; returns at once (`ready()` turns true as they come up)."""
        self._idle = asyncio.Queue()
        for _ in range(self.workers):
            self._start_one()

    async def stop(self) -> None:
        self._stopping = True
        for task in self._starting:
            task.cancel()
        workers = list(self._live)
        self._live.clear()
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in workers))
        self._threads.shutdown(wait=False, cancel_futures=True)

    def ready(self) -> bool:
        """At least one worker is up, so a request would be served."""
        return bool(self._live) and not self._stopping

    def queue_depth(self) -> int:
        """Requests waiting for a free worker now."""
        return self._waiting

    def status(self) -> dict[str, int]:
        idle = self._idle.qsize() if self._idle else 0
        return {"workers": len(self._live), "busy": len(self._live) - idle,
                "queued": self._waiting, "restarts": self.restarts}

    def _start_one(self) -> None:
        task = asyncio.get_running_loop().create_task(self._add_worker())
        self._starting.add(task)  # a strong reference, or the task may be garbage-collected
        task.add_done_callback(self._starting.discard)

    async def _add_worker(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            try:
                worker = await loop.run_in_executor(self._threads, WorkerProcess, self._ctx, self.warm_up)
            except Exception:  # e.g. out of processes; keep trying, readiness reports the gap
                log.exception("could not start a worker process; retrying")
                await asyncio.sleep(RESPAWN_BACKOFF_S)
                continue
            if await loop.run_in_executor(self._threads, worker.wait_ready, READY_TIMEOUT_S):
                if self._stopping:
                    await asyncio.to_thread(worker.stop)
                    return
                self._live.add(worker)
                self._idle.put_nowait(worker)
                return
            log.error("worker %s did not start; retrying", worker.process.pid)
            await asyncio.to_thread(worker.kill)
            await asyncio.sleep(RESPAWN_BACKOFF_S)

    # -- requests ------------------------------------------------------------------------------
    async def submit(self, program: Program, hardware: HardwareProfile,
                     options: OptimizeOptions, on_progress: Listener | None = None,
                     ticket: Ticket | None = None, bounded: bool = True) -> ResponseJSON:
        """`pipeline.optimize` in a worker, its progress reports handed to `on_progress` (on a pool
        thread). Raises what the pipeline raised (client errors keep their type and fields),
        QueueFull (only when `bounded`: a caller with its own bound waits), WorkerDied, or Cancelled
        (through `ticket`); a deadline answers the original program."""
        if self._idle is None or self._stopping:
            raise WorkerDied("the worker pool is not running")
        # Options as the caller resolved them (a server applies its defaults and caps first).
        if bounded and self._idle.empty() and self._waiting >= self.queue_depth:
            # a request takes about its time limit: by then a worker is likely free
            raise QueueFull(self.queue_depth, retry_after_s=max(1, round(options.time_limit_s)))
        self._waiting += 1
        try:
            worker = await self._idle.get()
            while not worker.alive():  # killed from outside while idle: replace it, not fail this request
                self._retire(worker)
                worker = await self._idle.get()
        finally:
            self._waiting -= 1
        if ticket is not None:
            if ticket.cancelled:
                self._idle.put_nowait(worker)
                raise Cancelled("cancelled before a worker took it")
            if ticket.on_start is not None:
                ticket.on_start()
        deadline_s = options.time_limit_s + self.deadline_grace_s
        loop = asyncio.get_running_loop()
        run = worker.exchange if ticket is None else partial(ticket.exchange, worker)
        exchange = loop.run_in_executor(self._threads, run, (program, hardware, options), deadline_s, on_progress)
        # Returned (or replaced) when the exchange ends, even if this request is cancelled meanwhile.
        exchange.add_done_callback(lambda done: self._release(worker, done))
        kind, value = await asyncio.shield(exchange)
        if ticket is not None and ticket.cancelled:
            raise Cancelled("cancelled while running; its worker was stopped")
        request = (program, hardware, options)
        if kind == "deadline":  # the original program's response is computed: off the event loop
            return await asyncio.to_thread(answer, kind, value, request, self.deadline_grace_s)
        return answer(kind, value, request, self.deadline_grace_s)

    def _release(self, worker: WorkerProcess, done: Future) -> None:
        """Back to the idle queue if it answered; otherwise replaced by a fresh worker."""
        if self._stopping:
            return
        failed = done.cancelled() or done.exception() is not None or done.result()[0] in ("deadline", "died")
        if not failed and worker.alive():
            self._idle.put_nowait(worker)
            return
        self._retire(worker)

    def _retire(self, worker: WorkerProcess) -> None:
        """Kill (or just reap) a worker and start its replacement."""
        self._live.discard(worker)
        self._threads.submit(worker.kill)
        self.restarts += 1
        self._start_one()
