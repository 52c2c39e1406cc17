"""Per-request table of the equation params that are not structural in the term language."""
from __future__ import annotations

import json
from typing import Any


# Id of the empty params: what rules give the ops they create (the wire decoder fills in the
# None-valued params JAX requires, such as `accuracy` or `out_dtype`).
NO_PARAMS = 0


class ParamsTable:
    """Content-addressed: equal params get equal ids, so equal equations hash-cons in the e-graph."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._entries: list[dict[str, Any]] = []
        self.intern({})  # NO_PARAMS

    def intern(self, params: dict[str, Any]) -> int:
        key = json.dumps(params, sort_keys=True)
        if key not in self._ids:
            self._ids[key] = len(self._entries)
            self._entries.append(params)
        return self._ids[key]

    def get(self, ident: int) -> dict[str, Any]:
        return dict(self._entries[ident])

    def __len__(self) -> int:
        return len(self._entries)
