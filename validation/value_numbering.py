"""Value numbering across programs: identical computations (from the same inputs by position, the
same consts, equal normal forms) get identical numbers in a shared table, and each value's operand
structure is hashed to recognise "the same value" just above a rewritten spot."""
from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from validation.normal_forms import is_literal, literal_of, normal_form, unordered
from wire.json_types import Eqn, Program
from wire.primitives import deterministic

# Levels of operands hashed to recognise "the same value" across programs, deepest first: deep
# hashes rarely collide, shallow ones still match just above a rewritten spot.
STRUCTURE_DEPTHS = (6, 4, 3, 2)
COMMUTATIVE = frozenset(["add", "mul", "max", "min", "and", "or", "xor", "eq", "ne"])  # operand structure hashes


def canon(x: Any) -> str:
    if isinstance(x, dict):  # params: a None-valued key and an absent one mean the same
        x = {k: v for k, v in x.items() if v is not None}
    return json.dumps(x, sort_keys=True, default=str)


class ValueTable:
    """Value numbers shared by every program numbered with it: identical computations (from the same
    inputs by position, the same consts), identical numbers; each equation is numbered by its
    normal form (validation/normal_forms.py), whose identities of real arithmetic (a merged GEMM's
    slices, sums in another order) apply only to a `real` table. Safe to share between threads."""

    def __init__(self, real: bool = False) -> None:
        self.real = real
        self._numbers: dict[Any, int] = {}
        self._next = itertools.count()

    def number(self, key: Any) -> int:
        found = self._numbers.get(key)
        return found if found is not None else self._numbers.setdefault(key, next(self._next))


class Numbered:
    """A program's value numbering over a shared table: identical computations, identical ids."""

    def __init__(self, program: Program, table: ValueTable):
        intern, self.real = table.number, table.real
        self.program, self.producer, self.key, self.aval = program, {}, {}, {}
        self.consts = {c["name"]: c for c in program.get("consts", [])}
        for k, spec in enumerate(program["inputs"]):
            self.key[spec["name"]], self.aval[spec["name"]] = intern(("in", k)), (tuple(spec["shape"]), spec["dtype"])
        for c in self.consts.values():
            self.key[c["name"]] = intern(("const", c["dtype"], tuple(c["shape"]), c["data"]))
            self.aval[c["name"]] = (tuple(c["shape"]), c["dtype"])
        self.signature = []  # per equation: everything but its variable operands
        self.form: dict[str, dict[str, Any]] = {}  # value -> the equation (or literal) it is numbered as
        self.output: dict[str, int] = {}  # value -> which output of its form it is
        repeats: dict[tuple, itertools.count] = {}
        for i, e in enumerate(program["eqns"]):
            self.signature.append(self._signature(e))
            for j, o in enumerate(e["out"]):
                self.aval[o["name"]] = (tuple(o["shape"]), o["dtype"])
            normal = normal_form(e, self.form.get, self._aval, table.real) if len(e["out"]) == 1 else e
            # the n-th of alike equations that need not compute alike (two random draws): numbered apart
            drawn = (
                () if deterministic(e) else (repeats.setdefault(self._identity(e, -1), itertools.count()).__next__(),)
            )
            for j, o in enumerate(e["out"]):
                if isinstance(normal, str):
                    self.key[o["name"]] = self.key[normal]
                    if normal in self.form:
                        self.form[o["name"]], self.output[o["name"]] = self.form[normal], self.output[normal]
                else:
                    self.key[o["name"]] = intern(("lit", canon(normal)) if is_literal(normal)
                                                 else self._identity(normal, j) + drawn)
                    self.form[o["name"]], self.output[o["name"]] = normal, j
                self.producer[o["name"]] = (i, j)
        self.by_key = {}
        for name, key in self.key.items():
            self.by_key.setdefault(key, name)
        self._shape_hash: dict[str, str] = {}

    @staticmethod
    def _signature(e: Eqn) -> tuple:
        return (e["op"], canon(e.get("params") or {}), tuple(None if isinstance(a, str) else canon(a) for a in e["in"]),
                tuple((tuple(o["shape"]), o["dtype"]) for o in e["out"]))

    def literal(self, operand: Any) -> str | None:
        """A literal operand, or a value folded to one, as canonical text; None for other values."""
        found = literal_of(operand, self.form.get)
        return None if found is None else canon(found)

    def _identity(self, e: Eqn, j: int) -> tuple:
        """What numbers output `j` of `e`: its op, params and output types, and its operands (numbers
        of values, literals as written), unordered where the op's operands are."""
        operands = [
            (0, self.key[a]) if lit is None else (1, lit) for a, lit in zip(e["in"], map(self.literal, e["in"]))
        ]
        if unordered(e, self.real):
            operands.sort()
        return (e["op"], canon(e.get("params") or {}), tuple((tuple(o["shape"]), o["dtype"]) for o in e["out"]),
                tuple(operands), j)

    def _aval(self, operand: Any) -> tuple[tuple[int, ...], str]:
        return self.aval[operand] if isinstance(operand, str) else ((), operand["dtype"])

    def structure(self, name: str, depth: int = STRUCTURE_DEPTHS[0]) -> str:
        """A hash of the value's operand tree `depth` levels deep: inputs by position, operands of a
        commutative op in sorted order, values below the horizon by type alone."""
        memo = (name, depth)
        if memo not in self._shape_hash:
            if name not in self.producer or depth == 0:
                text = repr(self.key[name]) if name not in self.producer else repr(self.aval[name])
            else:
                i, j = self.producer[name]
                eqn = self.program["eqns"][i]
                kids = [self.structure(a, depth - 1) if isinstance(a, str) else canon(a) for a in eqn["in"]]
                text = repr((self.signature[i], j, sorted(kids) if eqn["op"] in COMMUTATIVE else kids))
            self._shape_hash[memo] = hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
        return self._shape_hash[memo]
