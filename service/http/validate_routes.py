"""POST /v1/validate (translation validation of any candidate against an original with the same
signature) and POST /v1/debug (an optimized program run kernel by kernel against its original,
optionally with the rules to blame found by delta debugging: service/optimizer/debug.py)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from service.http.api_models import BODY_ERRORS, resolve_hardware
from service.http.optimize_request import program_within_limits
from service.http.settings import Settings, request_options, settings_of
from service.optimizer.debug import DebugRequest, DebugResponse, debug
from validation.translation import ValidateRequest, ValidateResponse, validate_programs

router = APIRouter(tags=["validate"], responses=BODY_ERRORS)


@router.post("/v1/validate", response_model=ValidateResponse,
             responses={422: {"description": "either program does not type-check, or their input or output "
                                             "signatures differ (the field is named)"}})
def validate_candidate(body: ValidateRequest, settings: Settings = Depends(settings_of)) -> Any:
    """Translation validation of any candidate against an original with the same signature."""
    original = program_within_limits(body.original, settings, "original")
    candidate = program_within_limits(body.candidate, settings, "candidate")
    return validate_programs(original, candidate, body.fp_mode, body.seed)


@router.post("/v1/debug", response_model=DebugResponse,
             responses={404: {"description": "unknown hardware profile name"},
                        422: {"description": "either program does not type-check, their input or output "
                                             "signatures differ (the field is named), or invalid options"}})
def debug_program(body: DebugRequest, settings: Settings = Depends(settings_of)) -> Any:
    """Per kernel of `optimized`: its error against the original values it stands for, the first
    kernel that diverges and the rewrites that shaped it; with `bisect_rules`, a minimal set of
    rules whose application makes validation fail (the original re-optimized per subset, in-process,
    within `bisect_time_limit_s`)."""
    original = program_within_limits(body.original, settings, "original")
    optimized = program_within_limits(body.optimized, settings, "optimized")
    return debug(original, optimized, resolve_hardware(body.hardware, settings.default_hardware),
                 request_options(body.options, settings), body.kernels, body.rewrites, body.bisect_rules, body.seed,
                 provenance=body.provenance,
                 bisect_time_limit_s=min(body.bisect_time_limit_s or settings.max_time_limit_s,
                                         settings.max_time_limit_s))
