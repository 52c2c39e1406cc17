"""A schemathesis check, loaded as its hooks file (SCHEMATHESIS_HOOKS): a request the OpenAPI schema calls valid may be
refused with 422 only for what no JSON Schema can say (a program that does not type-check, a
server limit, a profile value out of range), and then the detail locates it (`field`, `message`,
and `eqn` for a program). A 422 from the request models themselves would mean the schema and the
server disagree: that fails."""
from __future__ import annotations

import json

import schemathesis


@schemathesis.check
def refusals_of_valid_requests_are_located(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    try:
        detail = json.loads(response.content).get("detail")
    except (ValueError, AttributeError):
        detail = response.content[:200]
    if not (isinstance(detail, dict) and isinstance(detail.get("message"), str) and "field" in detail):
        raise AssertionError(f"the schema allows this request; the request models refused it: {detail}")
    return None
