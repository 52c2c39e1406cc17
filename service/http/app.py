"""The HTTP boundary: FastAPI routes over `service.optimizer.pipeline`, body-size limit, and the error mapping
that turns every client mistake into a 4xx."""
from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any

import jax
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from costmodel.profile import ProfileError, list_profiles, load_profile
from service import VERSION
from service.http import metrics
from service.http.api_models import (HardwareSummary, OptimizeRequest, SweepRequest, UnknownHardware, error_status,
                                     resolve_hardware)
from service.http.auth import require_token
from service.http.cache import ResultCache
from service.http.debug_routes import add_debug_routes
from service.http.job_routes import add_job_routes
from service.http.optimize_request import prepare, program_within_limits, run
from service.http.report_routes import add_report_routes
from service.http.settings import Settings, get_settings, request_options
from service.jobqueue.jobs import QueueFull, WorkerDied, WorkerPool
from service.optimizer.response import OptimizeResponse, SweepResponse
from service.optimizer.sweep import SweepError, sweep
from validation.translation import ValidateRequest, ValidateResponse, validate_programs
from wire.format import FORMAT, WireError


class BodySizeLimit:
    """Reject bodies over `max_bytes` with 413 before anything parses them: the declared
    Content-Length first, then the bytes actually received (chunked bodies declare nothing)."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send, f"{int(declared)} bytes")
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send, f"at least {len(body)} bytes")
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        detail = f"request body of {size} exceeds the limit of {self.max_bytes} bytes (OPTU_MAX_BODY_BYTES)"
        await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """400 for a body that is not JSON or speaks another format version; 422 for the rest."""
    for err in exc.errors():
        if err["type"] == "json_invalid":
            reason = err.get("ctx", {}).get("error", "JSON decode error")
            return JSONResponse({"detail": f"malformed JSON body: {reason} at {list(err['loc'][1:])}"},
                                status_code=400)
        kind = request.headers.get("content-type", "none")
        if tuple(err["loc"]) == ("body",) and "json" not in kind:
            # FastAPI does not parse a body whose Content-Type is not JSON; it arrives as bytes.
            return JSONResponse({"detail": f"request body must be JSON sent with Content-Type: "
                                           f"application/json (got {kind})"}, status_code=400)
        if tuple(err["loc"]) == ("body", "program", "format") and err["type"] == "literal_error":
            return JSONResponse({"detail": f"unknown format version {err.get('input')!r}; "
                                           f"this server speaks {FORMAT!r}"}, status_code=400)
    # Echoed inputs may be NaN/Infinity (Python's json accepts them) or exceptions; render
    # them as null/strings so reporting a bad request can never itself fail.
    detail = json.loads(to_json(exc.errors(), serialize_unknown=True, inf_nan_mode="null"))
    return JSONResponse({"detail": detail}, status_code=422)


async def _unparsable_body(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """FastAPI turns any failure to parse a JSON body other than a syntax error (in practice
    Python's recursion limit on deeply nested JSON) into a vague 400; say what it means."""
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        return JSONResponse({"detail": "request body could not be parsed: JSON nests too deeply "
                                       "(hundreds of levels) or is otherwise unparsable"}, status_code=400)
    return await http_exception_handler(request, exc)


async def _client_error(request: Request, exc: Exception) -> JSONResponse:
    status, detail = error_status(exc)
    return JSONResponse({"detail": detail}, status_code=status)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    # Starlette re-raises after this handler, so the server logs the traceback once.
    return JSONResponse({"detail": f"internal error: {type(exc).__name__}"}, status_code=500)


async def _busy(request: Request, exc: QueueFull | WorkerDied) -> JSONResponse:
    # 503 + Retry-After: the request was fine, the capacity was not; a retry can succeed.
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": str(exc.retry_after_s)})


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Worker processes live as long as the server. With OPTU_WORKERS=0, or when the lifespan never
    runs (a TestClient used outside `with`), requests are optimized in-process on a thread."""
    settings: Settings = app.state.settings
    if settings.workers > 0:
        app.state.pool = WorkerPool(settings.workers, settings.queue_depth, settings.deadline_grace_s, settings.warm_up)
        await app.state.pool.start()
    try:
        yield
    finally:
        await app.state.jobs.close()  # embedded jobs end with the server that runs them
        if app.state.pool is not None:
            await app.state.pool.stop()
            app.state.pool = None


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="optu-eqsat", version=VERSION,
                  description="Equality-saturation optimizer for JAX programs targeting an OPTU.",
                  dependencies=[Depends(require_token)],  # enforced on /v1/* only
                  lifespan=_lifespan)
    app.state.settings = settings
    app.state.pool = None  # a WorkerPool while the lifespan runs with workers > 0
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.state.metrics = metrics.install(app, settings)  # added last: outermost, so 413s are counted
    app.state.cache = ResultCache.from_settings(settings, observer=app.state.metrics)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _unparsable_body)
    # Raised by the pipeline or hardware resolution: the client's mistake, mapped in one place.
    for exc_type in (WireError, ProfileError, UnknownHardware, ValidationError):
        app.add_exception_handler(exc_type, _client_error)
    for exc_type in (QueueFull, WorkerDied):
        app.add_exception_handler(exc_type, _busy)
    app.add_exception_handler(Exception, _internal_error)
    _add_routes(app)
    add_job_routes(app, settings)
    add_report_routes(app)
    add_debug_routes(app, settings)
    return app


def _add_routes(app: FastAPI) -> None:
    @app.post("/v1/optimize", response_model=OptimizeResponse, tags=["optimize"],
              responses={400: {"description": "malformed JSON or unknown format version"},
                         404: {"description": "unknown hardware profile name"},
                         413: {"description": "body larger than OPTU_MAX_BODY_BYTES"},
                         422: {"description": "program does not type-check (eqn, field, message), "
                                              "too many equations, or invalid options/hardware"}})
    async def optimize(body: OptimizeRequest, settings: Settings = Depends(settings_of)) -> Any:
        # async so the worker pool is awaited on the loop; blocking steps (a large program's dump,
        # cache I/O, in-process optimization) go to threads so /healthz stays responsive.
        request = await prepare(body, settings)
        if (hit := await run_in_threadpool(app.state.cache.get, request.key)) is not None:
            return hit  # answered without computing
        result = await run(app, request.program, request.hardware, request.options)
        return await run_in_threadpool(app.state.cache.put, request.key, result)

    @app.post("/v1/sweep", response_model=SweepResponse, tags=["optimize"],
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

    @app.post("/v1/validate", response_model=ValidateResponse, tags=["validate"],
              responses={422: {"description": "either program does not type-check, or their input or output "
                                              "signatures differ (the field is named)"}})
    def validate_candidate(body: ValidateRequest, settings: Settings = Depends(settings_of)) -> Any:
        """Translation validation of any candidate against an original with the same signature."""
        original = program_within_limits(body.original, settings, "original")
        candidate = program_within_limits(body.candidate, settings, "candidate")
        return validate_programs(original, candidate, body.fp_mode, body.seed)

    @app.get("/v1/hardware", response_model=list[HardwareSummary], tags=["hardware"])
    def hardware_list() -> list[HardwareSummary]:
        return [HardwareSummary(name=n, description=load_profile(n).description) for n in list_profiles()]

    @app.get("/v1/hardware/{name}", tags=["hardware"], responses={404: {"description": "unknown name"}})
    def hardware_profile(name: str) -> dict[str, Any]:
        if name not in list_profiles():
            raise UnknownHardware(name)
        return load_profile(name).model_dump()

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"])
    def readyz(settings: Settings = Depends(settings_of)) -> JSONResponse:
        # Ready means a request could be served: the default profile loads and JAX has a backend.
        try:
            load_profile(settings.default_hardware)
            backend = jax.default_backend()
        except Exception as exc:  # any failure here means "not ready", reported, never raised
            return JSONResponse({"status": "not ready", "reason": f"{type(exc).__name__}: {exc}"},
                                status_code=503)
        if (reason := app.state.jobs.unready_reason()) is not None:
            return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)
        pool: WorkerPool | None = app.state.pool
        if pool is not None and not pool.ready():
            return JSONResponse({"status": "not ready", "reason": "no worker process is up yet",
                                 "workers": pool.status()}, status_code=503)
        return JSONResponse({"status": "ready", "default_hardware": settings.default_hardware,
                             "backend": backend, **({"workers": pool.status()} if pool else {})})


app = create_app()


def main() -> None:
    import uvicorn

    settings = get_settings()
    uvicorn.run(app, host=settings.host, port=settings.port)


if __name__ == "__main__":
    main()
