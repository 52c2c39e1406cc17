"""One optimization request on its way through the HTTP boundary, shared by /v1/optimize and the
job API: checked against this server's limits and resolved into an explicit program, profile,
options and request id (`prepare`), then run in the worker pool or, without one, on a thread
(`run`), with progress and cancellation where a job asks for them."""
from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI, HTTPException
from starlette.concurrency import run_in_threadpool

from costmodel.profile import HardwareProfile
from service.http.api_models import OptimizeRequest, count_equations, resolve_hardware
from service.http.limits import check_tensor_elements
from service.http.settings import Settings, request_options
from service.jobqueue.jobs import Cancelled, Ticket
from service.optimizer import pipeline
from service.optimizer.options import OptimizeOptions
from service.optimizer.progress import Listener, Progress, listening
from service.optimizer.request_key import canonical_request_id
from validation.response_json import ResponseJSON
from wire.format import WireError, WireProgram
from wire.json_types import Program


@dataclass(frozen=True)
class Prepared:
    program: Program
    hardware: str | HardwareProfile
    options: OptimizeOptions
    key: str


async def prepare(body: OptimizeRequest, settings: Settings) -> Prepared:
    """The request within this server's limits, its hardware resolved (a 4xx otherwise), its
    options with this server's defaults and caps, and its id."""
    program = await run_in_threadpool(program_within_limits, body.program, settings)
    hardware = resolve_hardware(body.hardware, settings.default_hardware)
    options = request_options(body.options, settings)
    return Prepared(
        program, hardware, options, await run_in_threadpool(canonical_request_id, program, hardware, options)
    )


async def run(app: FastAPI, program: Program, hardware: str | HardwareProfile, options: OptimizeOptions,
              on_progress: Listener | None = None, ticket: Ticket | None = None) -> ResponseJSON:
    """`pipeline.optimize` in a worker, or on a thread when the app has no pool (OPTU_WORKERS=0);
    there a cancelled ticket stops the search after its current saturation step or stage."""
    if app.state.pool is not None:
        # a job (it has a ticket) waits for a worker however many wait: the job store bounds jobs
        return await app.state.pool.submit(program, hardware, options, on_progress, ticket, bounded=ticket is None)

    def listener(facts: Progress) -> None:
        if ticket is not None and ticket.cancelled:
            raise Cancelled("cancelled while running")
        if on_progress is not None:
            on_progress(facts)

    def optimize_here() -> ResponseJSON:
        with listening(listener):
            return pipeline.optimize(program, hardware, options)

    return await run_in_threadpool(optimize_here)


def program_within_limits(wire: WireProgram, settings: Settings, field: str = "program") -> Program:
    """The program exactly as the client sent it (aliases, literal objects), so the in-process
    client and HTTP produce the same request id and result; 422 beyond OPTU_MAX_EQUATIONS or
    OPTU_MAX_TENSOR_ELEMENTS."""
    program = wire.model_dump(mode="json", by_alias=True)
    n_eqns = count_equations(program)
    if n_eqns > settings.max_equations:
        raise HTTPException(422, {"eqn": None, "field": f"{field}.eqns",
                                  "message": f"program has {n_eqns} equations; the limit is "
                                             f"{settings.max_equations} (OPTU_MAX_EQUATIONS)"})
    try:
        check_tensor_elements(program, settings.max_tensor_elements)
    except WireError as err:  # /v1/optimize's fields are the program's own; /v1/validate names which program
        raise err if field == "program" else WireError(err.message, eqn=err.eqn, field=f"{field}.{err.field}")
    return program


