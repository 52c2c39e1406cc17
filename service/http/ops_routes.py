"""GET /healthz (the process answers) and GET /readyz (a request could be served now: the default
profile loads, JAX has a backend, the job queue answers, a worker is up)."""
from __future__ import annotations

import jax
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from costmodel.profile import load_profile
from service.http.settings import Settings, settings_of
from service.jobqueue.jobs import WorkerPool

router = APIRouter(tags=["ops"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "not ready: the reason says what is missing"}})
def readyz(request: Request, settings: Settings = Depends(settings_of)) -> JSONResponse:
    try:
        load_profile(settings.default_hardware)
        backend = jax.default_backend()
    except Exception as exc:  # any failure here means "not ready", reported, never raised
        return JSONResponse({"status": "not ready", "reason": f"{type(exc).__name__}: {exc}"}, status_code=503)
    state = request.app.state
    if (reason := state.jobs.unready_reason()) is not None:
        return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)
    pool: WorkerPool | None = state.pool
    if pool is not None and not pool.ready():
        return JSONResponse({"status": "not ready", "reason": "no worker process is up yet",
                             "workers": pool.status()}, status_code=503)
    return JSONResponse({"status": "ready", "default_hardware": settings.default_hardware,
                         "backend": backend, **({"workers": pool.status()} if pool else {})})
