"""A wire program evaluated in float64 (complex128 for complex): every narrower float type promoted,
jitted once under JAX's x64 scoped to the call, so translation validation compares programs in
real arithmetic rather than in their own rounding."""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable

import jax
import numpy as np

from wire.execute import program_to_callable
from wire.format import ConstSpec, decode_array, encode_array
from wire.json_types import Program
from wire.primitives import nested_programs

WIDE = {"float16": "float64", "bfloat16": "float64", "float32": "float64", "complex64": "complex128"}
# A check's program runs a few times (two calls per draw), so compiling it well costs more than it
# saves. LLVM's optimizations off: a 1-layer encoder's region check compiles in 0.36 s instead of
# 0.55 s and runs no slower (its GEMMs are library calls). XLA's fusion emitters off as well (its
# older loop emitter): a Hugging Face T5's float64 program compiles in 0.27 s instead of 0.75 s,
# a SegFormer's in 0.29 s instead of 0.72 s, with the same results. Rounding may differ in the
# last bits from an optimized build, and both programs of a check are built alike, so only
# real-mode (float64) checks use it.
CHECK_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
# A grouped float64 convolution (a depthwise one, wav2vec2's positional one) is a loop nest of its
# own on XLA:CPU, about 60x slower unoptimized: wav2vec2's check program runs in 0.23 s unoptimized
# and 0.011 s optimized, and compiles in 0.25 s against 0.60 s, so from the second call on
# optimizing pays. Ungrouped ones run fast enough either way (Whisper's program: 0.01 s a call
# unoptimized), and optimizing its 700 equations would cost a second.
GROUPED_CONVOLUTION_CHECK_OPTIONS = {**CHECK_COMPILER_OPTIONS, "xla_backend_optimization_level": 2}


class CannotWiden(Exception):
    """The program does not evaluate in float64 (e.g. it bitcasts a float32 to an int32)."""


def widened(array: Any) -> Any:
    """A float array as float64, a complex one as complex128, the rest as it is (NumPy or JAX)."""
    wide = WIDE.get(str(array.dtype))
    return array.astype(wide) if wide else array


def widen(args: list[Any]) -> list[np.ndarray]:
    """`widened` host arrays."""
    return [widened(np.asarray(a)) for a in args]


def promote_to_float64(program: Program) -> Program:
    """The same program computing in float64 (complex128) wherever it computed in a narrower type."""
    consts = [
        {**c, "dtype": WIDE[c["dtype"]], "data": encode_array(decode_array(ConstSpec(**c)).astype(WIDE[c["dtype"]]))}
        if c["dtype"] in WIDE
        else c
        for c in program.get("consts", [])
    ]
    text = json.dumps({**program, "consts": []})
    for narrow, wide in WIDE.items():
        text = text.replace(f'"{narrow}"', f'"{wide}"')
    return {**json.loads(text), "consts": consts}


def float64_callable(program: Program) -> Callable[..., list[Any]]:
    """`program` promoted to float64 as a JAX-traceable callable (to be traced under x64)."""
    with jax.enable_x64(True):
        return program_to_callable(promote_to_float64(program))


def check_jit(fn: Callable[..., Any], programs: Iterable[Program]) -> Callable[..., Any]:
    """`jax.jit` for a float64 check's program `fn`, which runs `programs` in float64."""
    return jax.jit(fn, compiler_options=check_compiler_options(programs))


def check_compiler_options(programs: Iterable[Program]) -> dict[str, Any]:
    """`GROUPED_CONVOLUTION_CHECK_OPTIONS` where one of `programs` runs a grouped convolution, else
    `CHECK_COMPILER_OPTIONS`."""
    return GROUPED_CONVOLUTION_CHECK_OPTIONS if any(map(_convolves_in_groups, programs)) else CHECK_COMPILER_OPTIONS


def _convolves_in_groups(program: Program) -> bool:
    return any(any(map(_convolves_in_groups, nested_programs(eqn))) or eqn["op"] == "conv_general_dilated" and
               max(eqn["params"].get("feature_group_count", 1), eqn["params"].get("batch_group_count", 1)) > 1
               for eqn in program["eqns"])


class Widened:
    """A program evaluated in float64 (`promote_to_float64`), jitted once under scoped x64."""

    def __init__(self, program: Program):
        self.fn = check_jit(float64_callable(program), [program])

    def __call__(self, args: list[np.ndarray]) -> list[np.ndarray]:
        with jax.enable_x64(True):
            try:
                return [np.asarray(x) for x in self.fn(*args)]
            except (TypeError, ValueError) as err:  # a trace-time type error: the widened program is ill-typed
                raise CannotWiden(f"the program cannot be evaluated in float64: {err}") from err
