"""Observability: Prometheus metrics on a per-app registry and one structured
JSON log line per request.

Every app gets its own `CollectorRegistry`, so tests (and several apps in one process) never
share counters. `app.state.metrics` is the `Metrics` object: the middleware records requests,
the cache reports lookups and freshly computed responses, the worker pool calls
`set_queue_depth(n)` and `inc_worker_restarts()`, the job store reports each job's end, and job
counts, live workers and redeliveries are read from the job store at each scrape.
"""
from __future__ import annotations

import json
import logging
import sys
import time
import uuid
from contextvars import ContextVar
from typing import Protocol

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.settings import Settings
from validation.response_json import ResponseJSON

access_log = logging.getLogger("optu.access")

OPTIMIZE_ROUTE = "/v1/optimize"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MAX_REQUEST_ID = 128  # a client-chosen id longer than this (or not printable) is replaced

# Per-request facts gathered below the middleware (the cache outcome). The middleware installs a
# fresh dict; sync routes run in a copy of the context, which still holds this same dict.
_request_facts: ContextVar[dict[str, str | None] | None] = ContextVar("optu_request_facts", default=None)


class JobCounts(Protocol):
    """What a job store tells the metrics (either store of service.jobqueue.jobs)."""

    def count(self, state: str) -> float: ...

    def workers_up(self) -> float: ...

    def redeliveries(self) -> float: ...


class _Redeliveries(Collector):
    """A counter kept by the job store (in Redis, for the queue's workers), read at each scrape."""

    def __init__(self, jobs: JobCounts):
        self.jobs = jobs

    def collect(self):
        yield CounterMetricFamily("optu_job_redeliveries", "jobs run again after their worker died",
                                  value=self.jobs.redeliveries())


class Metrics:
    """The service's collectors, plus the hooks the cache and the worker pool call."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("optu_requests", "HTTP requests answered, by route template and status",
                                ["route", "method", "status"], registry=r)
        self.optimize_latency = Histogram("optu_optimize_latency_seconds", "POST /v1/optimize latency",
                                          ["cache"], buckets=LATENCY_BUCKETS, registry=r)
        self.stage_seconds = Histogram("optu_stage_seconds", "pipeline stage time of computed responses",
                                       ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.cache_lookups = Counter("optu_cache_lookups", "result cache lookups", ["result"], registry=r)
        self.queue_depth = Gauge("optu_queue_depth", "optimize requests waiting for a worker", registry=r)
        self.worker_restarts = Counter("optu_worker_restarts", "worker processes replaced", registry=r)
        self.jobs_queued = Gauge("optu_jobs_queued", "jobs waiting for a worker", registry=r)
        self.jobs_running = Gauge("optu_jobs_running", "jobs a worker is running", registry=r)
        self.job_seconds = Histogram("optu_job_duration_seconds", "job time from submit to its end, by final state",
                                     ["state"], buckets=LATENCY_BUCKETS, registry=r)
        self.workers = Gauge("optu_workers", "worker processes up", registry=r)
        for result in ("hit", "miss"):  # both series exist from the start, so rates are defined
            self.cache_lookups.labels(result=result)

    def cache_lookup(self, hit: bool) -> None:
        outcome = "hit" if hit else "miss"
        self.cache_lookups.labels(result=outcome).inc()
        facts = _request_facts.get()
        if facts is not None:
            facts["cache"] = outcome

    def optimized(self, response: ResponseJSON) -> None:
        """Stage timings of a response the pipeline just computed (hits carry stale ones)."""
        timings = (response.get("report") or {}).get("timings_s") or {}
        for stage, seconds in timings.items():
            if isinstance(seconds, (int, float)):
                self.stage_seconds.labels(stage=stage).observe(seconds)

    def set_queue_depth(self, n: int) -> None:
        self.queue_depth.set(n)

    def inc_worker_restarts(self) -> None:
        self.worker_restarts.inc()

    def watch(self, jobs: JobCounts) -> None:
        """Read the job counts, the live workers and the redeliveries at each scrape (never stale)."""
        self.jobs_queued.set_function(lambda: jobs.count("queued"))
        self.jobs_running.set_function(lambda: jobs.count("running"))
        self.workers.set_function(jobs.workers_up)
        self.registry.register(_Redeliveries(jobs))

    def job_finished(self, state: str, seconds: float) -> None:
        self.job_seconds.labels(state=state).observe(seconds)

    def render(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; fields passed as `extra={"fields": {...}}` are merged in."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": round(record.created, 6), "level": record.levelname, "logger": record.name,
                "message": record.getMessage()}
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: str) -> None:
    """JSON lines on stderr for the `optu` loggers; idempotent, so every create_app may call it."""
    logger = logging.getLogger("optu")
    logger.setLevel(logging.getLevelNamesMapping().get(level.upper(), logging.INFO))
    # Not propagated: a host that configured the root logger would print every line twice.
    logger.propagate = False
    if not any(isinstance(h.formatter, JsonFormatter) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)


def _request_id(scope: Scope) -> str:
    given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
    if 0 < len(given) <= MAX_REQUEST_ID and given.isprintable() and given.isascii():
        return given
    return uuid.uuid4().hex


class MetricsMiddleware:
    """Counts, times and logs every HTTP request; echoes its id in the `X-Request-ID` header."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _request_id(scope)
        facts: dict[str, str | None] = {"cache": None}  # a lookup of the result cache says hit or miss
        token = _request_facts.set(facts)
        status = 500  # what the client gets if the app raises before starting a response
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request_facts.reset(token)
            self._record(scope, rid, status, time.perf_counter() - start, facts["cache"])

    def _record(self, scope: Scope, rid: str, status: int, latency: float, cache: str | None) -> None:
        # The route template, not the path: /v1/hardware/{name} must not mint a series per name.
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        self.metrics.requests.labels(route=route, method=scope["method"], status=str(status)).inc()
        if route == OPTIMIZE_ROUTE:
            self.metrics.optimize_latency.labels(cache=cache or "none").observe(latency)
        access_log.info("request", extra={"fields": {
            "request_id": rid, "method": scope["method"], "route": route, "path": scope["path"],
            "status": status, "latency_s": round(latency, 6), "cache": cache}})


def install(app: FastAPI, settings: Settings) -> Metrics:
    """Metrics middleware, `GET /metrics` and JSON logging on `app`; returns the `Metrics`."""
    configure_logging(settings.log_level)
    metrics = Metrics()
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_api_route("/metrics", metrics.render, methods=["GET"], tags=["ops"],
                      response_class=Response, summary="Prometheus metrics")
    return metrics
