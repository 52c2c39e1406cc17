"""Checks that a JSON value holds what its TypedDict says, and that a TypedDict and the pydantic
model documenting the same JSON name the same keys."""
from __future__ import annotations

import types
import typing

from pydantic import BaseModel


def model_keys(model: type[BaseModel]) -> tuple[set[str], set[str]]:
    """(every key, the required keys) of `model`'s JSON, by alias."""
    names = {name: field.alias or name for name, field in model.model_fields.items()}
    return set(names.values()), {names[n] for n, f in model.model_fields.items() if f.is_required()}


def undeclared(value: object, hint: object, where: str = "value") -> list[str]:
    """Paths in `value` holding a key its TypedDict `hint` (searched through lists and unions) does
    not declare, or missing one it requires."""
    if typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint)
        found = [f"{where}.{k}: not declared" for k in value if k not in hints]
        found += [f"{where}.{k}: missing" for k in hint.__required_keys__ if k not in value]
        return found + [p for k, v in value.items() if k in hints for p in undeclared(v, hints[k], f"{where}.{k}")]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in args if (typing.is_typeddict(a) and isinstance(value, dict))
                or (typing.get_origin(a) is list and isinstance(value, list))]
        return undeclared(value, arms[0], where) if arms else []
    if origin is list:
        return [p for i, item in enumerate(value) for p in undeclared(item, args[0], f"{where}[{i}]")]
    return []
