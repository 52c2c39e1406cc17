"""The Docker engine as the deployment tests use it: `docker ...` and `docker-compose ...` with
their output kept for the failure message, and the image built from the working tree."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = "optu-eqsat:test"


def run(*command: str, timeout: float = 600, check: bool = True, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    if check:
        assert done.returncode == 0, f"{' '.join(command)}: {done.stdout[-1500:]} {done.stderr[-2500:]}"
    return done


def docker(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    return run("docker", *args, timeout=timeout, check=check)


def engine_or_skip() -> None:
    """Skip unless a Docker engine answers (under CI=true a skip fails: tests/conftest.py)."""
    if not (shutil.which("docker") and docker("info", timeout=60, check=False).returncode == 0):
        pytest.skip("no Docker engine answers (../shared/container/engine.sh starts one)")


def build_image() -> str:
    docker("build", "--network", "host", "-t", IMAGE, str(REPO), timeout=1200)
    return IMAGE


def healthy(container: str) -> bool:
    """Whether its HEALTHCHECK says healthy yet; a container that turned unhealthy fails the test."""
    state = docker("inspect", "--format", "{{.State.Health.Status}}", container).stdout.strip()
    assert state in ("starting", "healthy"), (container, state, docker("logs", container, check=False).stderr[-2000:])
    return state == "healthy"
