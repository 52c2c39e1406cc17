"""Reading Prometheus exposition text in tests: one series' value by name and labels."""
from __future__ import annotations

import re


def sample(text: str, name: str, **labels) -> float:
    """The value of one series in the exposition text (labels in any order)."""
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if m and dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or "")) == labels:
            return float(m.group(2))
    raise AssertionError(f"no sample {name}{labels}")
