"""How translation validation compares two values of one output: the normwise relative error
(complex values on both parts, integers and booleans exactly, nan and inf positions exactly), the
tolerance each declared dtype allows, and bit identity for `exact` mode."""
from __future__ import annotations

import numpy as np

# Normwise relative error allowed per declared dtype in `real` mode: reassociated sums in that
# precision. Integers, booleans and `exact` mode allow none.
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2,
             "complex128": 1e-9, "complex64": 1e-4}


def tolerance_for(dtype: str, fp_mode: str) -> float:
    return 0.0 if fp_mode == "exact" else TOLERANCE.get(dtype, 0.0)


def output_error(reference: np.ndarray, result: np.ndarray) -> float:
    """max |a - b| / max |reference| over the finite values (complex: the modulus of the
    difference, so both parts count); inf for a shape or dtype mismatch or nan/inf in different
    places; 1.0 for unequal integers or booleans."""
    ref, res = np.asarray(reference), np.asarray(result)
    if ref.shape != res.shape or ref.dtype != res.dtype:
        return float("inf")
    if not np.issubdtype(ref.dtype, np.inexact):
        return 0.0 if np.array_equal(ref, res) else 1.0
    wide = np.complex128 if np.issubdtype(ref.dtype, np.complexfloating) else np.float64
    ref, res = ref.astype(wide, copy=False), res.astype(wide, copy=False)
    if not ref.size:
        return 0.0
    # The common case in two passes: a max is nan or inf exactly when some value it covers is (or
    # the difference overflows), so finite maxima mean every value of both arrays is finite.
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf here sends the arrays to the masked path
        scale, difference = np.abs(ref).max(), np.abs(ref - res).max()
    if np.isfinite(scale) and np.isfinite(difference):
        return float(difference / max(scale, np.finfo(np.float64).tiny))
    finite = np.isfinite(ref)
    if not np.array_equal(finite, np.isfinite(res)) or not np.array_equal(ref[~finite], res[~finite],
                                                                          equal_nan=True):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(np.abs(ref[finite]).max(), np.finfo(np.float64).tiny)
    return float(np.abs(ref[finite] - res[finite]).max() / scale)


def informative(value: np.ndarray) -> bool:
    """Whether comparing against `value` can tell anything: not a float output that overflowed
    everywhere (matching inf positions would pass any program)."""
    array = np.asarray(value)
    return not (np.issubdtype(array.dtype, np.inexact) and array.size and not np.isfinite(array).any())


def bit_identical(reference: np.ndarray, result: np.ndarray) -> bool:
    """Equal values, including the sign of zero; nan matches nan (XLA does not keep payloads)."""
    ref, res = np.asarray(reference), np.asarray(result)
    if ref.shape != res.shape or ref.dtype != res.dtype:
        return False
    if not np.issubdtype(ref.dtype, np.inexact):
        return bool(np.array_equal(ref, res))
    if np.issubdtype(ref.dtype, np.complexfloating):
        return bit_identical(ref.real, res.real) and bit_identical(ref.imag, res.imag)
    nan = np.isnan(ref)
    return bool(np.array_equal(nan, np.isnan(res)) and np.array_equal(ref[~nan], res[~nan])
                and np.array_equal(np.signbit(ref[~nan]), np.signbit(res[~nan])))
