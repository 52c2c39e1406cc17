"""Load benchmark: throughput and p50/p99 latency of POST /v1/optimize, cached and uncached, at
concurrency 1 and 8, against a server this script starts on a loopback port (`python -m bench.load`)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from bench.report import publish
from service.http.devserver import running_server
from wire.capture import capture

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "load.json"
MODEL = "mlp2"


def bodies(program: dict, n: int, cached: bool, offset: int) -> list[bytes]:
    """Cached: the warm-up request again. Uncached: every request differs by its node_limit, which
    changes the canonical request id but hardly the work."""
    limits = [40_000] * n if cached else [40_001 + offset + i for i in range(n)]
    return [json.dumps({"program": program, "options": {"node_limit": k}}).encode() for k in limits]


def run_config(url: str, payloads: list[bytes], concurrency: int) -> dict:
    def send(content: bytes) -> tuple[float, int, str | None]:
        start = time.perf_counter()
        r = client.post(url + "/v1/optimize", content=content, headers={"content-type": "application/json"})
        cache = r.json().get("cache") if r.status_code == 200 else None
        return time.perf_counter() - start, r.status_code, cache

    with httpx.Client(timeout=300, limits=httpx.Limits(max_connections=concurrency)) as client:
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(send, payloads))
        wall = time.perf_counter() - start
    latencies = np.array([r[0] for r in results])
    return {"requests": len(results), "concurrency": concurrency, "errors": sum(r[1] != 200 for r in results),
            "cache_hits": sum(r[2] == "hit" for r in results), "wall_s": round(wall, 4),
            "throughput_rps": round(len(results) / wall, 3),
            "p50_ms": round(float(np.percentile(latencies, 50)) * 1e3, 2),
            "p99_ms": round(float(np.percentile(latencies, 99)) * 1e3, 2)}


def first_and_tenth(program: dict, settings: dict[str, str], servers: int = 3) -> dict:
    """Ten different requests one after another on a server that has served none: a worker warms
    up before it takes requests (service/optimizer/warm_up.py), so the first is no slower than the tenth.
    The server is ready once one worker is up; the requests start when all are, so the first is not
    measured beside another worker's start (on two cores, its warm-up takes one of them).
    One pair of requests is noise at this scale; the median ratio over fresh `servers` is reported."""
    pairs = []
    for k in range(servers):
        with running_server(settings, ready_path="/readyz", timeout_s=180, quiet=True) as (url, _), \
                httpx.Client(timeout=300) as client:
            _wait_for_workers(client, url, int(settings["OPTU_WORKERS"]))
            latencies = []
            for content in bodies(program, 10, cached=False, offset=-100 - 20 * k):
                start = time.perf_counter()
                assert client.post(url + "/v1/optimize", content=content,
                                   headers={"content-type": "application/json"}).status_code == 200
                latencies.append(time.perf_counter() - start)
            pairs.append((latencies[0], latencies[9]))
    first, tenth = (float(np.median(side)) for side in zip(*pairs))
    return {"servers": servers, "first_ms": round(first * 1e3, 2), "tenth_ms": round(tenth * 1e3, 2),
            "first_over_tenth": round(float(np.median([a / b for a, b in pairs])), 3)}


def _wait_for_workers(client: httpx.Client, url: str, workers: int, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.get(url + "/readyz").json().get("workers", {}).get("workers", 0) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} workers were not up within {timeout_s:.0f} s")
        time.sleep(0.2)


def table(rows: list[dict]) -> str:
    lines = ["| requests | concurrency | requests/s | p50 ms | p99 ms | cache hits | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['concurrency']} | {r['throughput_rps']:.2f} | {r['p50_ms']:.1f} | "
                     f"{r['p99_ms']:.1f} | {r['cache_hits']}/{r['requests']} | {r['errors']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=40, help="per configuration")
    parser.add_argument("--workers", type=int, default=os.cpu_count() and min(8, os.cpu_count()) or 2)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    fn, fargs = ZOO[MODEL]()
    program = capture(fn, *fargs, weight_argnums=WEIGHT_ARGNUMS[MODEL])
    rows = []
    with tempfile.TemporaryDirectory(prefix="optu-load-") as cache_dir:  # a cold cache every run
        settings = {"OPTU_CACHE_DIR": cache_dir, "OPTU_WORKERS": str(args.workers), "OPTU_QUEUE_DEPTH": "64",
                    "OPTU_LOG_LEVEL": "WARNING"}
        cold = first_and_tenth(program, settings)
        with running_server(settings, ready_path="/readyz", timeout_s=180, quiet=True) as (url, _):
            warm = bodies(program, 1, cached=True, offset=0)[0]
            assert httpx.post(url + "/v1/optimize", content=warm, timeout=300,
                              headers={"content-type": "application/json"}).status_code == 200
            for concurrency in (1, 8):
                for kind in ("uncached", "cached"):
                    payloads = bodies(program, args.requests, kind == "cached", offset=1000 * concurrency)
                    rows.append({"kind": kind, **run_config(url, payloads, concurrency)})
    result = {"model": MODEL, "workers": args.workers, "server": "uvicorn on loopback, one process",
              "first_request": cold, "configs": rows}
    publish(args.output, result,
            f"Load on {MODEL}, {args.workers} worker processes, {args.requests} requests per row:\n\n{table(rows)}\n\n"
            f"A fresh server's first request against its tenth (ten different requests, one at a time; median of "
            f"{cold['servers']} fresh servers): {cold['first_ms']:.0f} ms vs {cold['tenth_ms']:.0f} ms, "
            f"{cold['first_over_tenth']:.2f}x.", "load")
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
