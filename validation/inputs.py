"""The inputs translation validation runs programs on: seeded random draws, scaled like an
initialized network, contracted toward zero where the original is too sensitive to tell, and
nudged by a tiny relative amount to measure that sensitivity."""
from __future__ import annotations

import threading
import zlib
from typing import Any, NamedTuple

import jax
import numpy as np

from validation.index_ranges import index_bounds
from wire.json_types import Lit, Program, Tensor
from wire.primitives import GEMMS

TRIALS = 2  # input draws that must be able to tell before a program passes
SMALL_INTEGERS = 4  # integers not used as indices are drawn in [0, 4)


def input_scales(program: Program) -> list[float]:
    """1/sqrt(fan-in) for inputs used as the right operand of a contraction, else 1.

    Unit-variance weights make every matmul grow its output by sqrt(K): deep programs then saturate
    softmax and tanh (where rounding differences are amplified without bound) or overflow to inf
    (where every comparison passes vacuously). Scaled like an initialized network, values stay O(1)."""
    index = {spec["name"]: k for k, spec in enumerate(program["inputs"])}
    scales = [1.0] * len(program["inputs"])
    for eqn in program["eqns"]:
        if eqn["op"] not in GEMMS or len(eqn["in"]) != 2:
            continue
        rhs = eqn["in"][1]
        if not isinstance(rhs, str) or rhs not in index:
            continue
        shape = program["inputs"][index[rhs]]["shape"]
        if eqn["op"] == "dot_general":
            fan_in = int(np.prod([shape[d] for d in eqn["params"]["dimension_numbers"][0][1]]))
        else:
            out_feature = eqn["params"]["dimension_numbers"]["fields"]["rhs_spec"][0]
            fan_in = int(np.prod(shape)) // max(shape[out_feature], 1)
        scales[index[rhs]] = min(scales[index[rhs]], 1.0 / np.sqrt(max(fan_in, 1)))
    return scales


# Operands with no real result below zero. An input that reaches one only through views,
# conversions, slices, and adding or scaling by a positive literal (a running variance plus epsilon)
# is drawn positive, as a model's is: drawn normal, half its values would make NaNs that tell nothing.
_POSITIVE_DOMAIN = frozenset(["sqrt", "rsqrt", "log"])
_SIGN_KEEPING = frozenset(["broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose",
                           "convert_element_type", "copy", "slice"])


def positive_inputs(program: Program) -> frozenset[str]:
    """The inputs of `program` that reach a sqrt, rsqrt or log operand with their sign kept."""
    producer = {o["name"]: e for e in program["eqns"] for o in e["out"]}
    inputs = {s["name"] for s in program["inputs"]}
    stack = [e["in"][0] for e in program["eqns"] if e["op"] in _POSITIVE_DOMAIN and isinstance(e["in"][0], str)]
    found, seen = set(), set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        eqn = producer.get(name)
        if name in inputs:
            found.add(name)
        elif eqn is not None and eqn["op"] in _SIGN_KEEPING and isinstance(eqn["in"][0], str):
            stack.append(eqn["in"][0])
        elif eqn is not None and eqn["op"] in ("add", "mul") and len(eqn["in"]) == 2:
            names = [a for a in eqn["in"] if isinstance(a, str)]
            literals = [a for a in eqn["in"] if isinstance(a, dict)]
            if len(names) == 1 and literals and _positive_literal(literals[0]):
                stack.append(names[0])
    return frozenset(found)


def _positive_literal(literal: Lit) -> bool:
    try:
        return float(literal["lit"]) > 0
    except (TypeError, ValueError):
        return False


class InputDomain(NamedTuple):
    """Where inputs are drawn, read off the whole program their values feed (a check of a region
    draws its inputs as the whole program's check would): the inputs drawn positive, and the
    exclusive bound of each integer used as an index."""

    positive: frozenset[str]
    bounds: dict[str, int]

    @classmethod
    def of(cls, program: Program) -> InputDomain:
        return cls(positive_inputs(program), index_bounds(program))


class Draw(NamedTuple):
    """One draw of inputs: its seed, whether scaled by fan-in, and its contraction toward zero."""

    seed: int
    scaled: bool
    contraction: float


class Stopped(Exception):
    """The check's draws were stopped: its verdict is no longer wanted."""


class InputDraws:
    """Standard-normal draws and nudge directions per (trial seed, input), each made once and kept
    read-only: a whole run and a region run of the same trial share them (a region run reads a
    subset of the inputs), and they can be drawn ahead (`fill`) while the optimizer is still
    searching. Each input has a stream of its own, seeded by the trial seed and the input's name,
    so a subset draws the same.

    A check given a `stoppable()` view stops at its next draw once the view is `stop()`ped (raising
    `Stopped`): a speculative check whose verdict is no longer wanted gives the cores back.

    `outputs` keeps what a whole check's reference computed on a draw (its outputs there and on the
    draw nudged), so a later candidate's check against the same original runs only the candidate."""

    def __init__(self, arrays: dict[tuple, np.ndarray] | None = None, outputs: dict[tuple, Any] | None = None) -> None:
        self.arrays: dict[tuple, np.ndarray] = {} if arrays is None else arrays
        self.outputs: dict[tuple, Any] = {} if outputs is None else outputs
        self.stopped = threading.Event()

    def stoppable(self) -> InputDraws:
        """A view sharing these draws, with a stop of its own."""
        return InputDraws(self.arrays, self.outputs)

    def stop(self) -> None:
        self.stopped.set()

    def normal(self, seed: int, spec: Tensor) -> np.ndarray:
        """The input's standard-normal draw for trial `seed`, in its own type (4x faster on big weights)."""
        return self._kept((seed, spec["name"], tuple(spec["shape"]), spec["dtype"], "normal"), seed, spec,
                          lambda stream, shape: stream.standard_normal(shape, dtype=jax.numpy.dtype(spec["dtype"])))

    def direction(self, seed: int, spec: Tensor) -> np.ndarray:
        """The input's nudge direction for trial `seed`: uniform in [-1, 1) in float32 (a direction
        needs no more; uniform draws cost a quarter of normal ones, and big weights have millions)."""
        return self._kept((seed, spec["name"], tuple(spec["shape"]), "float32", "direction"), seed, spec,
                          lambda stream, shape: stream.random(shape, dtype=np.float32) * 2 - 1, salt=1)

    def _kept(self, key: tuple, seed: int, spec: Tensor, draw, salt: int = 0) -> np.ndarray:
        if key not in self.arrays:
            array = np.asarray(draw(_stream(seed, spec, salt), key[2]))  # a scalar draw too
            array.flags.writeable = False
            self.arrays[key] = array
        return self.arrays[key]

    def fill(self, program: Program, seeds: range = range(TRIALS), until: threading.Event | None = None) -> None:
        """Draw ahead what checks of `program` read on `seeds`: its float inputs and their nudge
        directions; stopped between arrays once `until` is set (a check that starts then draws
        what it reads itself, often a small part of a model's weights)."""
        for seed in seeds:
            for spec in program["inputs"]:
                if until is not None and until.is_set():
                    return
                if np.issubdtype(jax.numpy.dtype(spec["dtype"]), np.inexact):
                    self.direction(seed, spec)
                if spec["dtype"] in ("float32", "float64"):
                    self.normal(seed, spec)


def _stream(seed: int, spec: Tensor, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(spec["name"].encode()), salt])


def random_inputs(program: Program, seed: int, scaled: bool = False, draws: InputDraws | None = None,
                  contraction: float = 1.0, domain: InputDomain | None = None) -> list[np.ndarray]:
    """Seeded inputs: standard normal floats, with `scaled` divided by sqrt(fan-in) (`input_scales`),
    and every float multiplied by `contraction` (< 1 draws them toward zero, where recurrences and
    saturating activations stop amplifying differences); the positive ones of `domain` (by default
    `InputDomain.of(program)`) are their absolute values. An integer used as an index is drawn over
    the range its uses accept (`index_bounds`: every row of the table it reads); other integers are
    small (a count, a flag)."""
    draws = draws or InputDraws()
    if draws.stopped.is_set():
        raise Stopped("the check was stopped: its verdict is no longer wanted")
    arrays = []
    positive, bounds = domain or InputDomain.of(program)
    scales = input_scales(program) if scaled else [1.0] * len(program["inputs"])
    for spec, scale in zip(program["inputs"], scales):
        shape, dtype = tuple(spec["shape"]), jax.numpy.dtype(spec["dtype"])
        scale *= contraction
        if spec["dtype"] == "bool":
            arrays.append(_stream(seed, spec).random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            high = min(bounds.get(spec["name"], SMALL_INTEGERS), int(np.iinfo(dtype).max) + 1)
            arrays.append(_stream(seed, spec).integers(0, high, shape).astype(dtype))
        elif dtype in (np.float32, np.float64):
            normal = np.abs(draws.normal(seed, spec)) if spec["name"] in positive else draws.normal(seed, spec)
            arrays.append(normal if scale == 1.0 else normal * dtype.type(scale))
        elif np.issubdtype(dtype, np.complexfloating):
            stream = _stream(seed, spec)
            arrays.append(((stream.normal(size=shape) + 1j * stream.normal(size=shape)) * scale).astype(dtype))
        else:  # other floats (bfloat16, float16), drawn in float64
            values = _stream(seed, spec).normal(size=shape)
            arrays.append(((np.abs(values) if spec["name"] in positive else values) * scale).astype(dtype))
    return arrays


def nudges(program: Program, seed: int, draws: InputDraws | None = None) -> list[np.ndarray | None]:
    """Per input, a seeded direction to nudge it along (`InputDraws.direction`; None for integers
    and booleans): a check evaluates the original again on `x * (1 + relative * direction)` to
    measure its own sensitivity there."""
    draws = draws or InputDraws()
    return [draws.direction(seed, spec)
            if np.issubdtype(jax.numpy.dtype(spec["dtype"]), np.inexact) else None for spec in program["inputs"]]


def nudged(args: list[np.ndarray], directions: list[np.ndarray | None], relative: float) -> list[np.ndarray]:
    """`args` moved along `directions` (`nudges`) by `relative` of themselves."""
    return [a if d is None else a * (1 + relative * d.astype(a.real.dtype)) for a, d in zip(args, directions)]
