"""GET /v1/hardware (the shipped profiles) and GET /v1/hardware/{name} (one, every field with its
provenance)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from costmodel.profile import list_profiles, load_profile
from service.http.api_models import AUTH_ERRORS, HardwareSummary, UnknownHardware

router = APIRouter(tags=["hardware"], responses=AUTH_ERRORS)


@router.get("/v1/hardware", response_model=list[HardwareSummary])
def hardware_list() -> list[HardwareSummary]:
    return [HardwareSummary(name=n, description=load_profile(n).description) for n in list_profiles()]


@router.get("/v1/hardware/{name}", responses={404: {"description": "unknown name"}})
def hardware_profile(name: str) -> dict[str, Any]:
    if name not in list_profiles():
        raise UnknownHardware(name)
    return load_profile(name).model_dump()
