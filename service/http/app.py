"""The HTTP boundary, built by `create_app` (nothing is made at import): a router per resource
(optimize, validate, hardware, ops, jobs, reports), the body-size limit, and the error mapping that
turns every client mistake into a 4xx."""
from __future__ import annotations

import json
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from pydantic_core import to_json
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from costmodel.profile import ProfileError
from service import VERSION
from service.http import (hardware_routes, job_routes, metrics, ops_routes, optimize_routes, report_routes,
                          validate_routes)
from service.http.api_models import UnknownHardware, error_status
from service.http.auth import require_token
from service.http.cache import ResultCache
from service.http.job_routes import JOB_ERRORS, job_store
from service.http.settings import Settings, get_settings
from service.jobqueue.jobs import QueueFull, WorkerDied, WorkerPool
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


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's own errors, made exact. FastAPI turns any failure to parse a JSON body other than
    a syntax error (in practice Python's recursion limit on deeply nested JSON) into a vague 400: say
    what it means. A 405's `Allow` names the methods of the first route whose path matched; a path
    served by several routes (GET and DELETE /v1/jobs/{id}) allows all of theirs."""
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        return JSONResponse({"detail": "request body could not be parsed: JSON nests too deeply "
                                       "(hundreds of levels) or is otherwise unparsable"}, status_code=400)
    if exc.status_code == 405:
        allowed = [method for method in HTTP_METHODS
                   if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                          for route in request.app.routes)]
        return JSONResponse({"detail": f"method {request.method} not allowed; this path allows {', '.join(allowed)}"},
                            status_code=405, headers={"Allow": ", ".join(allowed)})
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
    app.add_exception_handler(StarletteHTTPException, _http_error)
    # Raised by the pipeline or hardware resolution: the client's mistake, mapped in one place.
    for exc_type in (WireError, ProfileError, UnknownHardware, ValidationError):
        app.add_exception_handler(exc_type, _client_error)
    for exc_type in (QueueFull, WorkerDied):
        app.add_exception_handler(exc_type, _busy)
    for exc_type, handler in JOB_ERRORS:
        app.add_exception_handler(exc_type, handler)
    app.add_exception_handler(Exception, _internal_error)
    app.state.jobs = job_store(app, settings)
    app.state.metrics.watch(app.state.jobs)
    for routes in (optimize_routes, validate_routes, hardware_routes, ops_routes, job_routes, report_routes):
        app.include_router(routes.router)
    return app


def main() -> None:
    import uvicorn

    settings = get_settings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port)


if __name__ == "__main__":
    main()
