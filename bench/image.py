"""The image (`python -m bench.image`): its size, what it adds to its python base and which
dependencies take that room (and what each is for), and the time from `docker run` to healthy, as
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
BASE = "python:3.11-slim"
TARGET_ABOVE_BASE_MB = 830
SITE_PACKAGES = "/opt/venv/lib/python3.11/site-packages"
SHOWN = 12  # the largest entries of site-packages listed; the rest summed
# What the service uses each large dependency for (an entry not named here is listed without a use).
USES = {"jaxlib": "XLA: compiles and runs every program (type checks, validation, the returned callables)",
        "jax": "tracing, jax.export and the wire format run as JAX",
        "scipy": "HiGHS, the exact ILP extraction", "scipy.libs": "scipy's BLAS and Fortran runtime",
        "numpy": "arrays throughout", "numpy.libs": "numpy's BLAS",
        "vl_convert": "the report's Vega, Vega-Lite and vega-embed JavaScript, inlined in each report",
        "egglog": "the e-graph", "black": "egglog's term printer (egglog requires it)",
        "ml_dtypes": "bfloat16 and float8 types", "pydantic_core": "request and response models",
        "celery": "the job queue", "kombu": "the job queue's messaging", "uvloop": "the HTTP server's event loop",
        "altair": "the report's chart specs", "sympy": "jax.export's symbolic dimensions",
        "opentelemetry": "egglog's tracing hooks (egglog requires it)", "rich": "the CLI's progress line",
        "pygments": "rich's highlighting", "jedi": "IPython's completion (egglog's widget requires IPython)",
        "jinja2": "the report's template", "redis": "the queue's and cache's client"}


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


def largest_dependencies(image: str) -> list[tuple[str, float]]:
    """(entry of the image's site-packages, MB) for the largest, then the rest summed as "other"."""
    script = ("import os,sys\nfor e in os.scandir(sys.argv[1]):\n"
              " n=sum(os.path.getsize(os.path.join(d,f)) for d,_,fs in os.walk(e.path) for f in fs) "
              "if e.is_dir() else e.stat().st_size\n print(n, e.name)")
    listed = docker("run", "--rm", "--entrypoint", "python", image, "-c", script, SITE_PACKAGES)
    sizes = sorted(((int(n) / 1e6, name) for n, name in (line.split(" ", 1) for line in listed.splitlines())),
                   reverse=True)
    rest = round(sum(mb for mb, _ in sizes[SHOWN:]), 1)
    return [(name, round(mb, 1)) for mb, name in sizes[:SHOWN]] + [("other", rest)]


def table(result: dict) -> str:
    added = result["size_mb"] - result["base_mb"]
    lines = [f"Image `{IMAGE}`: {result['size_mb']:.0f} MB, {added:.0f} MB above its `{BASE}` base (the stand-in "
             f"built here; target: at most {TARGET_ABOVE_BASE_MB} MB above it: "
             f"{'met' if added <= TARGET_ABOVE_BASE_MB else 'not met'}). `docker run` to healthy, median of "
             f"{result['runs']}: API {result['api_to_healthy_s']:.1f} s, worker {result['worker_to_healthy_s']:.1f} s "
             f"(a worker warms its child process first). Build: {result['build_s']:.0f} s (with the layer cache of "
             "earlier builds).", "", "What the image adds, by the largest entries of its site-packages:", "",
             "| dependency | MB | share of what the image adds | what the service uses it for |", "|---|---:|---:|---|"]
    lines += [f"| {name} | {mb:.0f} | {mb / added:.0%} | {USES.get(name, '')} |" for name, mb in result["largest"]]
    return "\n".join(lines)


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
    base_mb = int(docker("image", "inspect", "--format", "{{.Size}}", BASE)) / 1e6
    api = [seconds_to_healthy(IMAGE, ["serve"], {"OPTU_HOST": "127.0.0.1", "OPTU_PORT": str(free_port())})
           for _ in range(args.runs)]
    worker = [seconds_to_healthy(IMAGE, ["worker"], {"OPTU_QUEUE_URL": args.queue}) for _ in range(args.runs)]
    result = {"image": IMAGE, "size_mb": round(size_mb, 1), "base_mb": round(base_mb, 1),
              "largest": largest_dependencies(IMAGE), "build_s": round(build_s, 1),
              "api_to_healthy_s": round(float(np.median(api)), 2),
              "worker_to_healthy_s": round(float(np.median(worker)), 2), "runs": args.runs}
    publish(args.output, result, table(result), "image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
