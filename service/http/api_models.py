"""Request models of the HTTP API (the response model is the optimizer's own), the statuses every
route may answer, and the one mapping from client mistakes to status codes, shared by the app and
the in-process client so both answer a bad request the same way."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from costmodel.profile import (HardwareProfile, ProfileError, list_profiles, load_profile, profile_from_dict,
                               with_overrides)
from service.optimizer.options import OptimizeOptions
from wire.format import FORMAT, WireError, WireProgram
from wire.json_types import Program

# Statuses a route answers besides its own, declared on its router so that a client generated from
# the OpenAPI schema knows every status the server can send.
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "OPTU_API_TOKEN is set and the bearer token is missing or wrong"}}
BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    **AUTH_ERRORS,
    400: {"description": "the body is not JSON, not sent as application/json, or names another format version"},
    413: {"description": "body larger than OPTU_MAX_BODY_BYTES"}}
BUSY: dict[int | str, dict[str, Any]] = {
    503: {"description": "every worker is busy and the queue is full, or a worker died: retry after Retry-After"}}


class OptimizeRequest(BaseModel):
    # A typo such as "option" must be an error, not a silently ignored key; `0` is not `false`.
    model_config = ConfigDict(extra="forbid", strict=True)

    program: WireProgram = Field(description=f"the program to optimize, in the {FORMAT} wire format")
    hardware: str | dict[str, Any] | None = Field(
        None, description="a profile name from GET /v1/hardware, or a whole profile object; "
                          "default: the server's OPTU_DEFAULT_HARDWARE")
    options: OptimizeOptions | None = None


class SweepRequest(OptimizeRequest):
    params: dict[str, Annotated[list[int | float], Field(min_length=1)]] = Field(
        min_length=1, max_length=2, description="one or two dotted profile fields, each with the values to try, e.g. "
                    '{"gemm.rows": [64, 128, 256], "gemm.weight_load_s": [2e-6, 1e-5, 1e-9]}; '
                    "at most 25 grid points")


class HardwareSummary(BaseModel):
    name: str
    description: str


class UnknownHardware(LookupError):
    """A profile name that is not shipped; names never reach the filesystem as paths."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no hardware profile named {self.name!r}; known: {', '.join(list_profiles())}"


def resolve_hardware(hardware: str | dict | None, default: str) -> HardwareProfile:
    """The profile a request names (a shipped one), sends inline (validated) or derives from a
    shipped one by overrides; parsed here once, at the boundary. Paths are refused so a request
    cannot make the server read arbitrary files (load_profile accepts paths)."""
    name = default if hardware is None else hardware
    if isinstance(name, dict) and set(name) <= {"base", "overrides"}:
        # {"base": "optu-v1", "overrides": {"gemm.rows": 64}}: a shipped profile with named fields changed
        overrides = name.get("overrides") or {}
        if not isinstance(overrides, dict):
            raise ProfileError("hardware.overrides must be an object of dotted field names", field="overrides")
        return with_overrides(resolve_hardware(name.get("base"), default), overrides)
    if isinstance(name, dict):
        return profile_from_dict(name, source="request hardware")
    if name not in list_profiles():
        raise UnknownHardware(name)
    return load_profile(name)


def count_equations(program: Program) -> int:
    """Equations of a program including those of nested control-flow bodies in params."""
    total = 0
    stack: list[Any] = [program]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("eqns"), list):
                total += len(item["eqns"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def error_status(exc: BaseException) -> tuple[int, Any] | None:
    """(HTTP status, detail) for an exception that is the client's mistake; None otherwise."""
    if isinstance(exc, WireError):
        return 422, exc.to_dict()
    if isinstance(exc, UnknownHardware):
        return 404, str(exc)
    if isinstance(exc, ProfileError):
        field = f"hardware.{exc.field}" if exc.field else "hardware"
        return 422, {"field": field, "message": str(exc)}
    if isinstance(exc, ValidationError):
        return 422, [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
                     for e in exc.errors(include_url=False)]
    return None


def failure_detail(exc: Exception) -> Any:
    """What a failed job says of its exception: the 4xx detail of a client's mistake, else its type
    and message."""
    status = error_status(exc)
    return status[1] if status else f"{type(exc).__name__}: {exc}"
