"""Request limits checked before any work is queued."""
from __future__ import annotations

import math
from typing import Iterator

from wire.format import WireError
from wire.json_types import Program, Tensor


def _tensors(program: Program, where: str = "",
             top_eqn: int | None = None) -> Iterator[tuple[Tensor, str, int | None]]:
    """(spec, field, top-level eqn index) for every declared tensor, nested bodies included."""
    for kind in ("inputs", "consts"):
        for i, spec in enumerate(program.get(kind) or []):
            yield spec, f"{where}{kind}[{i}]", top_eqn
    for e, eqn in enumerate(program.get("eqns") or []):
        top = e if top_eqn is None else top_eqn
        for o, spec in enumerate(eqn.get("out") or []):
            yield spec, f"{where}eqns[{e}].out[{o}]", top
        stack = [(eqn.get("params"), f"{where}eqns[{e}].params")]
        while stack:  # bodies hide at any depth of params (e.g. a list of branches)
            item, path = stack.pop()
            if isinstance(item, dict) and isinstance(item.get("eqns"), list):
                yield from _tensors(item, path + ".", top)
            elif isinstance(item, dict):
                stack.extend((v, f"{path}.{k}") for k, v in item.items())
            elif isinstance(item, list):
                stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))


def check_tensor_elements(program: Program, limit: int) -> None:
    """WireError (a 422 naming the tensor) for any tensor with more than `limit` elements:
    validation materializes every tensor, so one huge shape could exhaust a worker's memory."""
    for spec, field, eqn in _tensors(program):
        shape = spec.get("shape") or []
        count = math.prod(int(d) for d in shape)
        if count > limit:
            raise WireError(f"tensor {spec.get('name')!r} of shape {list(shape)} has {count} elements; "
                            f"the limit is {limit} (OPTU_MAX_TENSOR_ELEMENTS)", eqn=eqn, field=field)
