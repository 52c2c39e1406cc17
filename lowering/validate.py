"""Translation validation: the optimized program must compute what the original computes.

Both run under jax.jit on the same seeded random inputs; outputs are compared with a per-dtype
tolerance on the normwise relative error (max |a - b| / max |reference|), nan and inf positions
must match exactly. In `exact` fp mode results must be bit-identical, signs of zero included.
"""
from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np

from lowering.to_jax import program_to_callable
from service.wire import ConstSpec, decode_array, encode_array

# Normwise relative error allowed per dtype in `real` mode: reassociated sums in that precision.
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


def random_inputs(program: dict[str, Any], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in program["inputs"]:
        shape, dtype = tuple(spec["shape"]), jax.numpy.dtype(spec["dtype"])
        if spec["dtype"] == "bool":
            arrays.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            arrays.append(rng.integers(0, 4, shape).astype(dtype))  # small: valid as indices too
        else:
            arrays.append(rng.normal(size=shape).astype(dtype))
    return arrays


def output_error(reference: np.ndarray, result: np.ndarray) -> float:
    """Normwise relative error; 1.0 (or inf) for a mismatch in nan/inf positions or exact types."""
    ref, res = np.asarray(reference), np.asarray(result)
    if ref.shape != res.shape or ref.dtype != res.dtype:
        return float("inf")
    if not np.issubdtype(ref.dtype, np.inexact):
        return 0.0 if np.array_equal(ref, res) else 1.0
    ref64, res64 = ref.astype(np.float64), res.astype(np.float64)
    finite = np.isfinite(ref64)
    if not np.array_equal(finite, np.isfinite(res64)) or not np.array_equal(ref64[~finite], res64[~finite],
                                                                            equal_nan=True):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(np.abs(ref64[finite]).max(), np.finfo(np.float64).tiny)
    return float(np.abs(ref64[finite] - res64[finite]).max() / scale)


def bit_identical(reference: np.ndarray, result: np.ndarray) -> bool:
    """Equal values, including the sign of zero; nan matches nan (XLA does not keep payloads)."""
    ref, res = np.asarray(reference), np.asarray(result)
    if ref.shape != res.shape or ref.dtype != res.dtype:
        return False
    if not np.issubdtype(ref.dtype, np.inexact):
        return bool(np.array_equal(ref, res))
    nan = np.isnan(ref)
    return bool(np.array_equal(nan, np.isnan(res)) and np.array_equal(ref[~nan], res[~nan])
                and np.array_equal(np.signbit(ref[~nan]), np.signbit(res[~nan])))


def tolerance_for(dtype: str, fp_mode: str) -> float:
    return 0.0 if fp_mode == "exact" else TOLERANCE.get(dtype, 0.0)


def validate(original: dict[str, Any], optimized: dict[str, Any], fp_mode: str = "real",
             trials: int = 2, seed: int = 0) -> dict[str, Any]:
    """{status, max_rel_error, trials, tolerance, criterion, original_rel_error}: original vs optimized.

    Real mode first compares the two float32 results. Where they differ by more than the
    tolerance, an ill-conditioned function (saturating activations on random inputs, long
    recurrences) may amplify rounding in either program, so both are then measured against a
    float64 evaluation of the original: the optimized program passes if it is no less accurate
    than the original (within 2x, or the tolerance)."""
    run_original = jax.jit(program_to_callable(original))
    run_optimized = jax.jit(program_to_callable(optimized))
    worst, failed, criterion, original_error = 0.0, False, "direct", 0.0
    for trial in range(trials):
        args = random_inputs(original, seed + trial)
        refs, results = run_original(*args), run_optimized(*args)
        for k, (ref, res) in enumerate(zip(refs, results)):
            error = output_error(ref, res)
            tolerance = tolerance_for(str(np.asarray(ref).dtype), fp_mode)
            if fp_mode == "exact":
                failed |= error > tolerance or not bit_identical(ref, res)
            elif error > tolerance and np.asarray(ref).dtype == np.float32:
                exact = float64_reference(original, args)[k]
                error = output_error(exact, np.asarray(res, np.float64))
                baseline = output_error(exact, np.asarray(ref, np.float64))
                failed |= error > max(tolerance, 2 * baseline)
                criterion, original_error = "float64_reference", max(original_error, baseline)
            else:
                failed |= error > tolerance
            worst = max(worst, error)
    return {"status": "failed" if failed else "passed", "max_rel_error": worst, "trials": trials,
            "tolerance": {d: tolerance_for(d, fp_mode) for d in sorted(TOLERANCE)}, "criterion": criterion,
            "original_rel_error": original_error}


def promote_to_float64(program: dict[str, Any]) -> dict[str, Any]:
    """The same program computing in float64 wherever it computed in float32."""
    consts = [{**c, "dtype": "float64", "data": encode_array(decode_array(ConstSpec(**c)).astype(np.float64))}
              if c["dtype"] == "float32" else c for c in program.get("consts", [])]
    promoted = json.loads(json.dumps({**program, "consts": []}).replace('"float32"', '"float64"'))
    return {**promoted, "consts": consts}


def float64_reference(program: dict[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    with jax.enable_x64(True):
        wide = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args]
        return [np.asarray(x) for x in program_to_callable(promote_to_float64(program))(*wide)]
