"""Bearer-token auth: with `OPTU_API_TOKEN` set, every `/v1/*` route requires
`Authorization: Bearer <token>`; health, readiness, metrics and the docs stay open.

Installed as an app-wide dependency that looks at the path, so a /v1 route added later is
covered without anyone remembering to protect it.
"""
from __future__ import annotations

import secrets

from fastapi import HTTPException, Request

PROTECTED_PREFIX = "/v1/"


def require_token(request: Request) -> None:
    """401 with `WWW-Authenticate: Bearer` unless the request carries the configured token."""
    expected = request.app.state.settings.api_token
    if not expected or not request.url.path.startswith(PROTECTED_PREFIX):
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # compare_digest on bytes: constant time in the token's content, and no TypeError on non-ASCII.
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), expected.encode()):
        raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
