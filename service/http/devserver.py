"""Run the real service in subprocesses: the API on a free loopback port, and job-queue workers.
What the live-server tests and the load benchmarks share."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(settings: dict[str, str] | None = None, *, ready_path: str = "/healthz",
                   timeout_s: float = 300.0, drop: tuple[str, ...] = (),
                   quiet: bool = False) -> Iterator[tuple[str, subprocess.Popen]]:
    """(url, process) of `uvicorn --factory service.http.app:create_app` with extra OPTU_* `settings` (and the variables
    in `drop` removed), once `ready_path` answers 200; stopped on exit. Importing JAX in a cold
    process (and in each spawned worker) takes seconds, more on a loaded machine: `timeout_s` is
    only a hang guard."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"PYTHONPATH": str(REPO_ROOT), **(settings or {})})
    output = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "service.http.app:create_app",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            cwd=REPO_ROOT, env=env, stdout=output, stderr=output)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with code {proc.returncode} before {ready_path} answered")
            try:
                if httpx.get(url + ready_path, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not answer {ready_path} within {timeout_s:.0f} s")
            time.sleep(0.2)
        yield url, proc
    finally:
        stop(proc)


def start_workers(names: list[str], settings: dict[str, str], timeout_s: float = 300.0) -> list[subprocess.Popen]:
    """`optu worker --name NAME` processes with the OPTU_* `settings` (OPTU_QUEUE_URL among them),
    returned once each has announced itself on the queue (its child process warm)."""
    import redis

    from service.jobqueue.broker import WORKER_PREFIX

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **settings}
    procs = [subprocess.Popen([sys.executable, "-m", "service.cli", "worker", "--name", name], cwd=REPO_ROOT,
                              env=env, stdout=subprocess.DEVNULL) for name in names]
    queue = redis.Redis.from_url(settings["OPTU_QUEUE_URL"])
    deadline = time.monotonic() + timeout_s
    while not all(queue.exists(WORKER_PREFIX + name) for name in names):
        if any(proc.poll() is not None for proc in procs) or time.monotonic() > deadline:
            for proc in procs:
                proc.kill()
            raise RuntimeError(f"workers {names} did not come up within {timeout_s:.0f} s")
        time.sleep(0.1)
    return procs


def stop(proc: subprocess.Popen) -> None:
    """Terminate a server process, killing it if it does not exit within 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
