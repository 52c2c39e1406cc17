"""POST /v1/optimize (one program, one profile; cached by the request's id) and POST /v1/sweep (one
program at every point of a grid of profile overrides)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from service.http.api_models import BODY_ERRORS, BUSY, OptimizeRequest, SweepRequest, resolve_hardware
from service.http.optimize_request import prepare, program_within_limits, run
from service.http.settings import Settings, request_options, settings_of
from service.optimizer.response import OptimizeResponse, SweepResponse
from service.optimizer.sweep import SweepError, sweep

router = APIRouter(tags=["optimize"], responses=BODY_ERRORS)


@router.post("/v1/optimize", response_model=OptimizeResponse,
             responses={**BUSY, 404: {"description": "unknown hardware profile name"},
                        422: {"description": "program does not type-check (eqn, field, message), "
                                             "too many equations, or invalid options/hardware"}})
async def optimize(body: OptimizeRequest, request: Request, settings: Settings = Depends(settings_of)) -> Any:
    # async so the worker pool is awaited on the loop; blocking steps (a large program's dump,
    # cache I/O, in-process optimization) go to threads so /healthz stays responsive.
    app = request.app
    prepared = await prepare(body, settings)
    if (hit := await run_in_threadpool(app.state.cache.get, prepared.key)) is not None:
        return hit  # answered without computing
    result = await run(app, prepared.program, prepared.hardware, prepared.options)
    return await run_in_threadpool(app.state.cache.put, prepared.key, result)


@router.post("/v1/sweep", response_model=SweepResponse,
             responses={404: {"description": "unknown hardware profile name"},
                        422: {"description": "more than 2 params or 25 points, an unknown or invalid "
                                             "profile field (named), or a program that does not type-check"}})
def sweep_hardware(body: SweepRequest, settings: Settings = Depends(settings_of)) -> Any:
    """Optimize the program at every point of a grid of profile overrides, re-extracting each."""
    program = program_within_limits(body.program, settings)
    hardware = resolve_hardware(body.hardware, settings.default_hardware)
    try:
        return sweep(program, hardware, body.params, request_options(body.options, settings))
    except SweepError as exc:  # a ProfileError too, but the field lives in params, not hardware
        raise HTTPException(422, {"field": exc.field, "message": str(exc)}) from None
