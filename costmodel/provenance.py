"""Where each number of a hardware profile comes from: a checkable `source` (a paper, table or
figure and the value read there; a measurement and how it was made; a definition) or
`assumed = true` with a one-line `reason`. A profile's `[provenance]` table holds one entry per
dotted field ("gemm.clock_hz"); shipped profiles label every number, and the headline estimates
are swept across the range of the assumed ones (bench/assumptions.py)."""
from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

OVERRIDDEN = "set by a request's override, not the profile's own number"


class Basis(BaseModel):
    """One number's provenance: exactly one of `source`, or `assumed` with its `reason`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str | None = Field(None, min_length=1)
    assumed: bool = False
    reason: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_kind(self) -> Basis:
        if self.assumed and (self.reason is None or self.source is not None):
            raise ValueError("an assumed number gives a 'reason' and no 'source'")
        if not self.assumed and (self.source is None or self.reason is not None):
            raise ValueError("give a 'source', or 'assumed = true' with a 'reason'")
        return self


class LabelledProfile(Protocol):
    """What these functions read of a hardware profile: its fields and their labels."""

    provenance: dict[str, Basis]

    def model_dump(self, **kwargs: Any) -> dict[str, Any]: ...


def fields(profile: LabelledProfile) -> dict[str, Any]:
    """Every field of `profile` by dotted name, defaults included, with its value (None for an
    optional term that is off)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: dict[str, Any]) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(f"{prefix}{key}.", value)
            else:
                out[f"{prefix}{key}"] = value

    walk("", profile.model_dump(exclude={"provenance"}))
    return out


def numbers(profile: LabelledProfile) -> dict[str, Any]:
    """Every number (and flag) of `profile` by dotted field, defaults included: the fields a label
    must cover (an optional term that is off, None, is not a number)."""
    return {name: value for name, value in fields(profile).items() if isinstance(value, (int, float))}


def unlabelled(profile: LabelledProfile) -> list[str]:
    """Dotted fields of `profile` whose number has neither a source nor an assumption."""
    return sorted(set(numbers(profile)) - set(profile.provenance))


def assumed(profile: LabelledProfile) -> dict[str, Any]:
    """The assumed numbers of `profile`, by dotted field."""
    return {name: value for name, value in numbers(profile).items()
            if name in profile.provenance and profile.provenance[name].assumed}


def overridden(provenance: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """`provenance` (as dumped) with each overridden field labelled as such."""
    return {**provenance, **{name: {"assumed": True, "reason": OVERRIDDEN} for name in names}}


def render_profile_fields(fields: dict[str, dict[str, tuple[Any, str | None, str | None]]]) -> list[str]:
    """TOML lines for `fields` (section -> key -> (value, source, assumption); section "" is the
    top level) followed by the `[provenance]` table that labels every one of them."""
    lines: list[str] = []
    labels: list[str] = []
    for section, entries in fields.items():
        if section:
            lines += ["", f"[{section}]"]
        for key, (value, source, reason) in entries.items():
            lines.append(f"{key} = {_toml_value(value)}")
            basis = {"source": source} if source is not None else {"assumed": True, "reason": reason}
            labels.append(f"{json.dumps(f'{section}.{key}' if section else key)} = {_inline_table(basis)}")
    return [*lines, "", "[provenance]", *labels]


def _toml_value(value: Any) -> str:
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):  # a table: a row a line
        return "[\n" + "".join(f"  {_toml_value(row)},\n" for row in value) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"  # TOML reads 1e+10 and 1024 alike; the schema accepts ints for floats


def _inline_table(basis: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {'true' if v is True else json.dumps(v)}" for k, v in basis.items()) + "}"
