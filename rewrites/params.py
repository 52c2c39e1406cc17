"""Per-request table of the equation params that are not structural in the term language."""
from __future__ import annotations

import json
from typing import Any


class ParamsTable:
    """Content-addressed: equal params get equal ids, so equal equations hash-cons in the e-graph."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._entries: list[dict[str, Any]] = []

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
