"""The report API: GET /v1/results/{id}/report renders the HTML report of any result this server
(or a replica sharing its cache) returned, by the result's id; GET /v1/jobs/{id}/report does the
same for a job's result."""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from service.http.api_models import AUTH_ERRORS
from service.http.job_routes import QUEUE_UNREACHABLE
from service.report import render_report

REPORT_DOC = "a self-contained HTML page: summary, kernel timeline, roofline, dataflow before and after, rewrites"


router = APIRouter(tags=["reports"], responses=AUTH_ERRORS)


@router.get("/v1/results/{result_id}/report", response_class=HTMLResponse,
            responses={200: {"description": REPORT_DOC},
                       404: {"description": "no stored result has this id"}})
def result_report(result_id: str, request: Request) -> HTMLResponse:
    # Plain def: the lookup and the rendering block, so they run on a thread.
    response = request.app.state.cache.stored(result_id)
    if response is None:
        raise HTTPException(404, f"no result with id {result_id!r}: ids are those of /v1/optimize and job "
                                 "responses this server stored (a result is gone once its cache entry is)")
    return HTMLResponse(render_report(response))


@router.get("/v1/jobs/{job_id}/report", response_class=HTMLResponse,
            responses={**QUEUE_UNREACHABLE, 200: {"description": REPORT_DOC}, 404: {"description": "unknown job"},
                       409: {"description": "the job has not succeeded (yet): its state says why"}})
async def job_report(job_id: str, request: Request) -> HTMLResponse:
    response = await request.app.state.jobs.result(job_id)
    return HTMLResponse(await run_in_threadpool(render_report, response))
