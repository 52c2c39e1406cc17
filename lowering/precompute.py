"""Weight-only work run once per weight set, as `kernel.precompute_weights` prices it.

A program's values computed only from its weights and constants (`lowering.kernels.static_names`)
do not change between calls that pass the same weights. `split_weight_work` cuts them off into a
program of their own; `PrecomputedProgram` runs that part only when the weights change and the
rest on every call. That is what the estimate promised for a profile that precomputes, and what a
plain `jax.jit` of the whole program cannot do (its weights are arguments, not constants).
"""
from __future__ import annotations

import threading
from typing import Any

import jax

from lowering.kernels import static_names
from wire.execute import jitted_program
from wire.json_types import Program


def split_weight_work(program: Program) -> tuple[Program, Program]:
    """(ahead, per_call): `ahead` computes the weight-only values (`static_names`) that the rest
    reads; `per_call` is the rest, taking them as extra inputs after the original ones."""
    static, inputs = static_names(program), {s["name"] for s in program["inputs"]}
    is_static = lambda e: all(o["name"] in static for o in e["out"])
    avals = {o["name"]: o for e in program["eqns"] for o in e["out"]}
    rest = [e for e in program["eqns"] if not is_static(e)]
    reads = [a for e in rest for a in e["in"] if isinstance(a, str)] + \
        [o for o in program["outputs"] if isinstance(o, str)]
    needed = list(dict.fromkeys(a for a in reads if a in avals and a in static and a not in inputs))
    ahead = {**program, "eqns": [e for e in program["eqns"] if is_static(e)], "outputs": needed}
    per_call = {**program, "eqns": rest, "inputs": [*program["inputs"], *(
        {"name": n, "shape": avals[n]["shape"], "dtype": avals[n]["dtype"]} for n in needed)]}
    return ahead, per_call


def _reusable(value: Any) -> bool:
    """A concrete JAX array cannot change, so the same object means the same weights; a NumPy
    array can be written in place, and a tracer belongs to one trace."""
    return isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)


class PrecomputedProgram:
    """The program as a function of its flat inputs, its weight-only part run again only when a
    weight argument is a different object (or one that may have changed: not a JAX array)."""

    def __init__(self, program: Program, ahead: Program, per_call: Program):
        self.weights = [k for k, s in enumerate(program["inputs"]) if s.get("role") == "weight"]
        self.ahead = jitted_program(ahead)
        self.per_call = jitted_program(per_call)
        self.lock = threading.Lock()
        # (weights, values): holding the weight objects keeps their ids from being reused
        self.last: tuple[list[Any], list[Any]] | None = None
        self.precompute_runs = 0

    @classmethod
    def of(cls, program: Program) -> PrecomputedProgram | None:
        """One for `program` when it has weight inputs and work that reads nothing else, else None."""
        if not any(s.get("role") == "weight" for s in program["inputs"]):
            return None
        ahead, per_call = split_weight_work(program)
        return cls(program, ahead, per_call) if ahead["outputs"] else None

    def __call__(self, *leaves: Any) -> list[Any]:
        weights = [leaves[k] for k in self.weights]
        reusable = all(_reusable(w) for w in weights)
        with self.lock:
            if reusable and self.last is not None and all(w is v for w, v in zip(weights, self.last[0])):
                values = self.last[1]
            else:
                values = self.ahead(*leaves)
                self.precompute_runs += 1
                self.last = (weights, values) if reusable else None
        return self.per_call(*leaves, *values)
