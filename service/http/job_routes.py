"""The job API: POST /v1/jobs (the body of /v1/optimize) answers 202 at once; GET /v1/jobs/{id}
tells the state and progress, GET /v1/jobs/{id}/result gives what /v1/optimize would have
answered, DELETE /v1/jobs/{id} cancels. A request that cannot run is refused at submit (the same
4xx /v1/optimize gives), never turned into a failed job later. Jobs run in this server's own pool,
or on the shared queue when OPTU_QUEUE_URL is set."""
from __future__ import annotations

from typing import Any, Literal

import redis
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from service.http.api_models import AUTH_ERRORS, BODY_ERRORS, OptimizeRequest, failure_detail
from service.http.optimize_request import prepare, run
from service.http.settings import Settings, settings_of
from service.jobqueue.jobs import JobFinished, JobQueueFull, Jobs, NoResult, UnknownJob, open_jobs
from service.optimizer.response import OptimizeResponse
from wire.execute import typecheck


class JobProgress(BaseModel):
    stage: str | None = Field(description="the pipeline stage running now (typecheck, saturate, fuse, validate, ...; "
                                          "done once succeeded)")
    egraph_nodes: int | None = Field(description="e-nodes of the latest e-graph, once saturated")
    best_estimate_s: float | None = Field(description="estimated time of the best program found so far")
    elapsed_s: float = Field(description="seconds since a worker took the job (0 while queued)")


class JobStatus(BaseModel):
    id: str = Field(description="the job's id: its request's id, so the same request names the same job")
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"] = Field(description="where the job is")
    progress: JobProgress = Field(description="how far the search has come")
    error: Any = Field(None, description="why the job failed or was cancelled")


class JobSubmitted(JobStatus):
    status_url: str = Field(description="poll this for the state")
    result_url: str = Field(description="the response, once the state is succeeded")


async def _unknown(request: Request, exc: UnknownJob) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _finished(request: Request, exc: JobFinished) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


async def _no_result(request: Request, exc: NoResult) -> JSONResponse:
    return JSONResponse({"detail": str(exc), **exc.status}, status_code=409)


async def _queue_unreachable(request: Request, exc: redis.RedisError) -> JSONResponse:
    return JSONResponse({"detail": f"the job queue (OPTU_QUEUE_URL) is unreachable: {type(exc).__name__}: {exc}"},
                        status_code=503, headers={"Retry-After": "5"})


async def _full(request: Request, exc: JobQueueFull) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=429, headers={"Retry-After": str(exc.retry_after_s)})


def job_store(app: FastAPI, settings: Settings) -> Jobs:
    """The shared queue's jobs when OPTU_QUEUE_URL names one; otherwise this server's own."""
    return open_jobs(app.state.cache, settings.job_queue_depth, settings.job_ttl_s, queue_url=settings.queue_url,
                     visibility_timeout_s=settings.queue_visibility_timeout_s,
                     run=lambda *request: run(app, *request),
                     workers_up=lambda: app.state.pool.status()["workers"] if app.state.pool is not None else 0,
                     describe_failure=failure_detail, on_finish=app.state.metrics.job_finished)


# The job API's own errors, each as its status (the app registers them).
JOB_ERRORS = ((UnknownJob, _unknown), (JobFinished, _finished), (NoResult, _no_result), (JobQueueFull, _full),
              (redis.RedisError, _queue_unreachable))

QUEUE_UNREACHABLE = {503: {"description": "the job queue (OPTU_QUEUE_URL) is unreachable: retry after Retry-After"}}
router = APIRouter(tags=["jobs"], responses={**AUTH_ERRORS, **QUEUE_UNREACHABLE})


def _jobs(request: Request) -> Jobs:
    return request.app.state.jobs


@router.post("/v1/jobs", status_code=202, response_model=JobSubmitted,
             responses={**BODY_ERRORS, 404: {"description": "unknown hardware profile name"},
                        422: {"description": "the program does not type-check, or invalid options/hardware "
                                             "(as /v1/optimize)"},
                        429: {"description": "OPTU_JOB_QUEUE_DEPTH jobs already queued or running"}})
async def submit(body: OptimizeRequest, jobs: Jobs = Depends(_jobs), settings: Settings = Depends(settings_of)) -> Any:
    request = await prepare(body, settings)
    await run_in_threadpool(typecheck, request.program)  # a bad program is this 422, not a failed job
    status = await jobs.submit(request.key, request.program, request.hardware, request.options)
    return {**status, "status_url": f"/v1/jobs/{status['id']}", "result_url": f"/v1/jobs/{status['id']}/result"}


@router.get("/v1/jobs/{job_id}", response_model=JobStatus,
            responses={404: {"description": "unknown job (or forgotten after OPTU_JOB_TTL_S)"}})
async def status(job_id: str, jobs: Jobs = Depends(_jobs)) -> Any:
    return await jobs.status(job_id)


@router.get("/v1/jobs/{job_id}/result", response_model=OptimizeResponse,
            responses={404: {"description": "unknown job"},
                       409: {"description": "the job has not succeeded (yet): its state says why"}})
async def result(job_id: str, jobs: Jobs = Depends(_jobs)) -> Any:
    return await jobs.result(job_id)


@router.delete("/v1/jobs/{job_id}", response_model=JobStatus,
               responses={404: {"description": "unknown job"}, 409: {"description": "the job already finished"}})
async def cancel(job_id: str, jobs: Jobs = Depends(_jobs)) -> Any:
    return await jobs.cancel(job_id)
