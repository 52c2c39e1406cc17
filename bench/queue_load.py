"""Job-queue throughput (`python -m bench.queue_load`): jobs/s through a real API (OPTU_QUEUE_URL on
the machine's Redis) and 1 or 2 `optu worker` processes, for model jobs and for one-equation jobs;
and what the queue itself costs a job: its Redis commands, and the wall time a job takes with one
worker beyond the same optimization in-process."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import redis

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from bench.report import publish
from service.http.devserver import REPO_ROOT, running_server, start_workers, stop
from service.optimizer import pipeline
from wire.capture import capture

RESULTS = REPO_ROOT / "bench" / "results" / "queue_load.json"
MODEL = "mlp2"
TRIVIAL = {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}], "consts": [],
           "eqns": [{"op": "neg", "in": ["x"], "out": [{"name": "y", "shape": [4], "dtype": "float32"}],
                     "params": {}}], "outputs": ["y"]}


POLL_S = 0.1  # each pending job's status is asked this often (a client's polling costs Redis commands too)


def jobs_per_second(url: str, queue: redis.Redis, program: dict, n: int, offset: int) -> dict:
    """Submit `n` different jobs at once (each its own node limit, so none is a cache hit), wait for
    all; their count over the wall time from the first submit to the last success, and the Redis
    commands per job meanwhile."""
    commands = queue.info("stats")["total_commands_processed"]
    with httpx.Client(base_url=url, timeout=60) as client:
        start = time.perf_counter()
        ids = []
        for i in range(n):
            answer = client.post("/v1/jobs", json={"program": program, "options": {"node_limit": 50_000 + offset + i}})
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        submitted = time.perf_counter() - start
        pending = set(ids)
        while pending:
            for job_id in list(pending):
                state = client.get(f"/v1/jobs/{job_id}").json()["state"]
                assert state in ("queued", "running", "succeeded"), (job_id, state)
                if state == "succeeded":
                    pending.discard(job_id)
            time.sleep(POLL_S)
        wall = time.perf_counter() - start
    commands = queue.info("stats")["total_commands_processed"] - commands
    return {"jobs": n, "wall_s": round(wall, 3), "jobs_per_s": round(n / wall, 3),
            "submits_per_s": round(n / submitted, 1), "redis_commands_per_job": round(commands / n, 1)}


def in_process_s(program: dict, n: int = 5) -> float:
    """Median time of the same optimization without the queue (warm, in this process)."""
    times = []
    for i in range(n + 1):
        start = time.perf_counter()
        pipeline.optimize(program, None, {"node_limit": 60_000 + i})
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=16, help="per row")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/10", help="a database this bench may empty")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    fn, fargs = ZOO[MODEL]()
    model = capture(fn, *fargs, weight_argnums=WEIGHT_ARGNUMS[MODEL])
    rows = []
    with tempfile.TemporaryDirectory(prefix="optu-queue-load-") as cache_dir:
        for workers in (1, 2):
            redis.Redis.from_url(args.redis).flushdb()
            settings = {"OPTU_QUEUE_URL": args.redis, "OPTU_CACHE_DIR": f"{cache_dir}/{workers}", "OPTU_WORKERS": "0",
                        "OPTU_LOG_LEVEL": "WARNING", "OPTU_JOB_QUEUE_DEPTH": str(4 * args.jobs), "TMPDIR": cache_dir}
            procs = start_workers([f"bench-{workers}-{k}" for k in range(workers)], settings)
            try:
                with running_server(settings, quiet=True) as (url, _):
                    queue = redis.Redis.from_url(args.redis)
                    jobs_per_second(url, queue, TRIVIAL, 2, offset=-10)  # each worker's first job, unmeasured
                    for kind, program in (("model", model), ("one-equation", TRIVIAL)):
                        rows.append({"kind": kind, "workers": workers,
                                     **jobs_per_second(url, queue, program, args.jobs, offset=1000 * workers)})
            finally:
                for proc in procs:
                    stop(proc)
        redis.Redis.from_url(args.redis).flushdb()
    by = {(r["kind"], r["workers"]): r for r in rows}
    scaling = {
        kind: round(by[(kind, 2)]["jobs_per_s"] / by[(kind, 1)]["jobs_per_s"], 3) for kind in ("model", "one-equation")
    }
    # one worker runs jobs one after another: its time per job beyond the search is the queue's
    overhead = {kind: round((by[(kind, 1)]["wall_s"] / args.jobs - in_process_s(program)) * 1e3, 1)
                for kind, program in (("model", model), ("one-equation", TRIVIAL))}
    lines = ["| jobs | workers | jobs | wall s | jobs/s | submits/s | Redis commands per job |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['kind']} | {r['workers']} | {r['jobs']} | {r['wall_s']:.2f} | {r['jobs_per_s']:.2f} | "
              f"{r['submits_per_s']:.0f} | {r['redis_commands_per_job']:.0f} |" for r in rows]
    publish(args.output, {"model": MODEL, "poll_s": POLL_S, "rows": rows, "two_over_one": scaling,
                          "queue_overhead_ms_per_job": overhead},
            f"Job queue on this machine ({MODEL} and one-equation jobs; the API, Redis, the workers and this "
            f"client, polling each job every {POLL_S:g} s, share its 2 cores):\n\n" + "\n".join(lines) +
            f"\n\n2 workers over 1: {scaling['model']:.2f}x on {MODEL}, {scaling['one-equation']:.2f}x on "
            f"one-equation jobs. A job's time with one worker beyond the same optimization in-process: "
            f"{overhead['model']:.0f} ms ({MODEL}), {overhead['one-equation']:.0f} ms (one equation).", "queue_load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
