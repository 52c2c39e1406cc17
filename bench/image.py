"""The image (`python -m bench.image`): its size and the time from `docker run` to healthy, as
built here by `make image`'s command. Probed every second (`--health-interval 1s`) rather than
every 15 s as deployed, so the figure is the service's start, not the probe's schedule."""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.report import publish
from service.http.devserver import REPO_ROOT, free_port

RESULTS = REPO_ROOT / "bench" / "results" / "image.json"
IMAGE = "optu-eqsat:0.1.0"


def docker(*args: str, timeout: float = 1200) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=True).stdout


def seconds_to_healthy(image: str, role: list[str], env: dict[str, str]) -> float:
    """One container of `image` in `role`, read-only on the host network: seconds until healthy."""
    settings = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
    start = time.perf_counter()
    container = docker("run", "-d", "--network", "host", "--read-only", "--tmpfs", "/tmp", "--tmpfs", "/var/cache/optu",
                       "--health-interval", "1s",
                       *settings, image, *role).strip()
    try:
        while docker("inspect", "--format", "{{.State.Health.Status}}", container).strip() != "healthy":
            assert docker("inspect", "--format", "{{.State.Running}}", container).strip() == "true", \
                docker("logs", container)
            time.sleep(0.2)
        return time.perf_counter() - start
    finally:
        docker("rm", "-f", container)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queue", default="redis://127.0.0.1:6379/10", help="the workers' queue (a Redis)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        print("bench.image: no Docker engine answers; nothing measured", file=sys.stderr)
        return 0
    start = time.perf_counter()
    docker("build", "--network", "host", "-t", IMAGE, str(REPO_ROOT))
    build_s = time.perf_counter() - start
    size_mb = int(docker("image", "inspect", "--format", "{{.Size}}", IMAGE)) / 1e6
    api = [seconds_to_healthy(IMAGE, ["serve"], {"OPTU_HOST": "127.0.0.1", "OPTU_PORT": str(free_port())})
           for _ in range(args.runs)]
    worker = [seconds_to_healthy(IMAGE, ["worker"], {"OPTU_QUEUE_URL": args.queue}) for _ in range(args.runs)]
    result = {"image": IMAGE, "size_mb": round(size_mb, 1), "build_s": round(build_s, 1),
              "api_to_healthy_s": round(float(np.median(api)), 2),
              "worker_to_healthy_s": round(float(np.median(worker)), 2), "runs": args.runs}
    publish(args.output, result,
            f"Image `{IMAGE}`: {result['size_mb']:.0f} MB (the stand-in `python:3.11-slim` base included); "
            f"`docker run` to healthy, median of {args.runs}: API {result['api_to_healthy_s']:.1f} s, worker "
            f"{result['worker_to_healthy_s']:.1f} s (a worker warms its child process first). Build: "
            f"{result['build_s']:.0f} s (with the layer cache of earlier builds).", "image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
