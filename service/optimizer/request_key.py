"""The one name of a request: a hash of its canonical form, which is both the response's `id` and
the result cache's key.

Programs that differ only in the names of their internal variables hash alike: inputs, consts and
equation outputs are renamed to their definition index (nested bodies get their own numbering).
The requester's input names (in order) and output references are hashed as well, so a cached
answer's program has the interface the request asked for. The hardware profile's numbers (not
their provenance), the options as the optimizer runs them, the version and a fingerprint of the
optimizer's source complete it.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

from costmodel.profile import HardwareProfile
from service import VERSION
from service.optimizer.options import OptimizeOptions
from wire.format import is_nested_program
from wire.json_types import Program


def _canonical_program(program: Program) -> Program:
    """`program` with every variable it defines replaced by its definition index (an int, so it
    cannot collide with a name left as a string because it is undefined here)."""
    names: dict[str, int] = {}
    counter = itertools.count()

    def define(spec: dict[str, Any]) -> dict[str, Any]:
        # A redefinition gets a fresh index and shadows the old one, as a reader of the program sees it.
        names[spec.get("name")] = next(counter)
        return {**spec, "name": names[spec.get("name")]}

    def ref(operand: Any) -> Any:
        return names.get(operand, operand) if isinstance(operand, str) else operand

    inputs = [define(s) for s in program.get("inputs", [])]
    consts = [define(s) for s in program.get("consts", [])]
    eqns = []
    for eqn in program.get("eqns", []):
        operands = [ref(o) for o in eqn.get("in", [])]  # resolved before this eqn's outputs exist
        eqns.append({**eqn, "in": operands, "params": _canonical_params(eqn.get("params") or {}),
                     "out": [define(s) for s in eqn.get("out", [])]})
    return {**program, "inputs": inputs, "consts": consts, "eqns": eqns,
            "outputs": [ref(o) for o in program.get("outputs", [])]}


def _canonical_params(value: Any) -> Any:
    """Params with every nested program canonical (rebuilt, not copied and then replaced)."""
    if is_nested_program(value):
        return {**value, "program": _canonical_program(value["program"])}
    if isinstance(value, dict):
        return {k: _canonical_params(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical_params(v) for v in value]
    return value


def source_files() -> list[Path]:
    """The optimizer's own source and profiles, every package found where Python imports it from
    (so moving a module cannot leave the fingerprint covering nothing)."""
    files: list[Path] = []
    for package in ("wire", "rewrites", "costmodel", "lowering", "service"):
        root = Path(next(iter(importlib.util.find_spec(package).submodule_search_locations)))
        files += sorted(path for path in root.rglob("*") if path.suffix in (".py", ".toml"))
    return files


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of `source_files()`: a cached result never outlives the code that made it (VERSION
    alone is not bumped for every change, and the SQLite cache persists on disk)."""
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def canonical_request_id(program: Program, profile: HardwareProfile, options: OptimizeOptions) -> str:
    """Hash of the canonical request: program up to internal renaming, its interface names, the
    hardware profile, the options as run (every limit resolved, so leaving one unset and giving
    its default name the same request), the project version and the code fingerprint."""
    interface = [[s.get("name") for s in program.get("inputs", [])], program.get("outputs", [])]
    canonical = json.dumps([_canonical_program(program), interface, profile.costs(),
                            options.model_dump(mode="json"), VERSION, code_fingerprint()],
                           sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
