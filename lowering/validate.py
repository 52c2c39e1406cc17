"""Translation validation: the optimized program must compute what the original computes.

Both run under jax.jit on the same seeded random inputs; outputs are compared with a per-dtype
tolerance on the normwise relative error (max |a - b| / max |reference|), nan and inf positions
must match exactly. In `exact` fp mode results must be bit-identical, signs of zero included.

Big programs are mostly unchanged by the optimizer, so real mode first checks only what changed
(`find_regions`): values computed identically in both programs need no run, and each rewritten
region of the optimized program runs on the values the original really feeds it, compared with
the original's own value there; of regions that are the same check (the same optimized computation
for the same original one, as in an encoder's layers) the earliest runs. Any
doubt (a region outside tolerance, a correspondence not found, regions covering most of the
program) falls back to running both whole programs, which stays the authority.
"""
from __future__ import annotations

import json
import zlib
from typing import Any, Callable

import jax
import numpy as np

from lowering.regions import Region, RegionPlan, check_key, cone, find_regions
from lowering.to_jax import program_to_callable
from service.wire import ConstSpec, decode_array, encode_array

# Normwise relative error allowed per dtype in `real` mode: reassociated sums in that precision.
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}
# Beyond this share of the optimized program in regions, checking them costs as much as the whole.
MAX_REGION_SHARE = 0.6
TRIALS = 2  # random input draws per validation (one more where standard-normal inputs overflow)


def input_scales(program: dict[str, Any]) -> list[float]:
    """1/sqrt(fan-in) for inputs used as the right operand of a contraction, else 1.

    Unit-variance weights make every matmul grow its output by sqrt(K): deep programs then saturate
    softmax and tanh (where rounding differences are amplified without bound) or overflow to inf
    (where every comparison passes vacuously). Scaled like an initialized network, values stay O(1)."""
    index = {spec["name"]: k for k, spec in enumerate(program["inputs"])}
    scales = [1.0] * len(program["inputs"])
    for eqn in program["eqns"]:
        if eqn["op"] not in ("dot_general", "conv_general_dilated") or len(eqn["in"]) != 2:
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


class InputDraws:
    """Standard-normal draws per (trial seed, input), each made once and kept read-only: a whole run
    and a region run of the same trial share them (a region run reads a subset of the inputs, scaled),
    and they can be drawn ahead (`fill`) while the optimizer is still searching. Each input has a
    stream of its own, seeded by the trial seed and the input's name, so a subset draws the same."""

    def __init__(self) -> None:
        self.arrays: dict[tuple, np.ndarray] = {}

    def normal(self, seed: int, spec: dict[str, Any]) -> np.ndarray:
        key = (seed, spec["name"], tuple(spec["shape"]), spec["dtype"])
        if key not in self.arrays:  # drawn in the target type: 4x faster on big weights
            array = _stream(seed, spec).standard_normal(key[2], dtype=jax.numpy.dtype(spec["dtype"]))
            array.flags.writeable = False
            self.arrays[key] = array
        return self.arrays[key]

    def fill(self, program: dict[str, Any], seeds: range = range(TRIALS)) -> None:
        for seed in seeds:
            for spec in program["inputs"]:
                if spec["dtype"] in ("float32", "float64"):
                    self.normal(seed, spec)


def _stream(seed: int, spec: dict[str, Any]) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(spec["name"].encode())])


def random_inputs(program: dict[str, Any], seed: int, scaled: bool = False,
                  draws: InputDraws | None = None) -> list[np.ndarray]:
    """Seeded inputs: standard normal floats, or with `scaled` normal / sqrt(fan-in) (`input_scales`)."""
    draws = draws or InputDraws()
    arrays = []
    scales = input_scales(program) if scaled else [1.0] * len(program["inputs"])
    for spec, scale in zip(program["inputs"], scales):
        shape, dtype = tuple(spec["shape"]), jax.numpy.dtype(spec["dtype"])
        if spec["dtype"] == "bool":
            arrays.append(_stream(seed, spec).random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            arrays.append(_stream(seed, spec).integers(0, 4, shape).astype(dtype))  # small: valid as indices too
        elif dtype in (np.float32, np.float64):
            normal = draws.normal(seed, spec)
            arrays.append(normal if scale == 1.0 else normal * dtype.type(scale))
        else:
            arrays.append((_stream(seed, spec).normal(size=shape) * scale).astype(dtype))
    return arrays


def output_error(reference: np.ndarray, result: np.ndarray) -> float:
    """Normwise relative error; 1.0 (or inf) for a mismatch in nan/inf positions or exact types."""
    ref, res = np.asarray(reference), np.asarray(result)
    if ref.shape != res.shape or ref.dtype != res.dtype:
        return float("inf")
    if not np.issubdtype(ref.dtype, np.inexact):
        return 0.0 if np.array_equal(ref, res) else 1.0
    ref64, res64 = ref.astype(np.float64), res.astype(np.float64)
    if np.isfinite(ref64).all() and np.isfinite(res64).all():  # the common case, without masked copies
        scale = max(np.abs(ref64).max(initial=0.0), np.finfo(np.float64).tiny)
        return float(np.abs(ref64 - res64).max(initial=0.0) / scale) if ref64.size else 0.0
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


class Comparison:
    """Accumulates reference-vs-result comparisons under one fp mode (the rules of the docstring)."""

    def __init__(self, fp_mode: str):
        self.fp_mode, self.worst, self.failed = fp_mode, 0.0, False
        self.criterion, self.original_error = "direct", 0.0

    def check(self, ref: Any, res: Any, exact: Callable[[], np.ndarray] | None) -> None:
        """`exact()` gives the float64 reference, computed only when float32 results disagree;
        without one a disagreement beyond tolerance fails."""
        error = output_error(ref, res)
        tolerance = tolerance_for(str(np.asarray(ref).dtype), self.fp_mode)
        if self.fp_mode == "exact":
            self.failed |= error > tolerance or not bit_identical(ref, res)
        elif error > tolerance and np.asarray(ref).dtype == np.float32 and exact is not None:
            wide = exact()
            error = output_error(wide, np.asarray(res, np.float64))
            baseline = output_error(wide, np.asarray(ref, np.float64))
            self.failed |= error > max(tolerance, 2 * baseline)
            self.criterion, self.original_error = "float64_reference", max(self.original_error, baseline)
        else:
            self.failed |= error > tolerance
        self.worst = max(self.worst, error)

    def result(self, trials: int, **extra: Any) -> dict[str, Any]:
        return {"status": "failed" if self.failed else "passed", "max_rel_error": self.worst, "trials": trials,
                "tolerance": {d: tolerance_for(d, self.fp_mode) for d in sorted(TOLERANCE)},
                "criterion": self.criterion, "original_rel_error": self.original_error, **extra}


def validate(original: dict[str, Any], optimized: dict[str, Any], fp_mode: str = "real",
             trials: int = TRIALS, seed: int = 0, draws: InputDraws | None = None) -> dict[str, Any]:
    """{status, max_rel_error, trials, tolerance, criterion, original_rel_error}: original vs optimized.

    Real mode compares float32 results directly; where they differ by more than the tolerance, an
    ill-conditioned function (saturating activations, long recurrences) may amplify rounding in
    either program, so both are then measured against a float64 evaluation of the original: the
    optimized program passes if it is no less accurate than the original (within 2x, or the
    tolerance). `criterion` says how the verdict was reached: `identical` (same computation, no
    run needed), `regions` (only the rewritten regions ran), `direct` or `float64_reference`.

    A region check that fails is not the verdict (its pairing of values is a heuristic), but
    neither may a whole run on nicer inputs overrule it: deep random networks lose sensitivity
    (attention in a 12-layer encoder barely depends on its query weights), so the whole run uses
    the same standard-normal inputs as ever. `draws` may hold the inputs drawn ahead."""
    plan, draws = find_regions(original, optimized), draws or InputDraws()
    if plan is not None and not plan.regions:
        return Comparison(fp_mode).result(0, criterion="identical")
    if plan is not None and fp_mode == "real" and plan.share <= MAX_REGION_SHARE:
        checked = region_validate(original, optimized, plan, Comparison(fp_mode), trials, seed, draws)
        if checked["status"] == "passed":
            return checked
    return validate_whole(original, optimized, fp_mode, trials, seed, draws)


def validate_pieces(original: dict[str, Any], optimized: dict[str, Any],
                    pieces: list[tuple[dict[str, Any], dict[str, Any]]], fp_mode: str = "real") -> dict[str, Any]:
    """`optimized` stitched from optimized pieces of `original` (service/partition.py): each
    distinct piece checked against the piece it replaces, as a program of its own (an encoder's
    twelve layers: one check). A piece that does not pass sends the verdict to `validate`."""
    results = [validate(written, searched, fp_mode) for written, searched in pieces]
    if any(r["status"] != "passed" for r in results):
        return validate(original, optimized, fp_mode)
    worst = max(results, key=lambda r: r["max_rel_error"])
    return {**worst, "trials": min(r["trials"] for r in results), "criterion": "pieces",
            "pieces": [r["criterion"] for r in results]}


def validate_whole(original: dict[str, Any], optimized: dict[str, Any], fp_mode: str = "real",
                   trials: int = TRIALS, seed: int = 0, draws: InputDraws | None = None) -> dict[str, Any]:
    """Both whole programs, each jitted once, on every trial's standard-normal inputs. Where those
    overflow (the original's float results hold inf or nan, so positions match vacuously), every
    later trial draws fan-in scaled inputs instead, and one is added if none is left: another
    standard-normal draw would overflow alike and check nothing more."""
    run_original = jax.jit(program_to_callable(original))
    run_optimized = jax.jit(program_to_callable(optimized))
    wide = Float64Reference(original)
    comparison = Comparison(fp_mode)
    done, scaled, scaled_done = 0, False, 0
    while done < trials or (scaled and not scaled_done):
        args = random_inputs(original, seed + done, scaled, draws)
        done, scaled_done = done + 1, scaled_done + scaled
        refs, results = run_original(*args), run_optimized(*args)
        for k, (ref, res) in enumerate(zip(refs, results)):
            comparison.check(ref, res, lambda k=k: wide(args)[k])
            ref = np.asarray(ref)
            scaled = scaled or (np.issubdtype(ref.dtype, np.inexact) and not np.isfinite(ref).all())
    return comparison.result(done)


def promote_to_float64(program: dict[str, Any]) -> dict[str, Any]:
    """The same program computing in float64 wherever it computed in float32."""
    consts = [{**c, "dtype": "float64", "data": encode_array(decode_array(ConstSpec(**c)).astype(np.float64))}
              if c["dtype"] == "float32" else c for c in program.get("consts", [])]
    promoted = json.loads(json.dumps({**program, "consts": []}).replace('"float32"', '"float64"'))
    return {**promoted, "consts": consts}


class Float64Reference:
    """The program evaluated in float64, jitted once on first use and memoized per argument list
    (a multi-output program asks once per output)."""

    def __init__(self, program: dict[str, Any]):
        self.program, self.fn, self.last = program, None, (None, None)

    def __call__(self, args: list[np.ndarray]) -> list[np.ndarray]:
        if self.last[0] is args:
            return self.last[1]
        with jax.enable_x64(True):
            if self.fn is None:
                self.fn = jax.jit(program_to_callable(promote_to_float64(self.program)))
            wide = [np.asarray(a).astype(np.float64) if np.asarray(a).dtype == np.float32 else a for a in args]
            outs = [np.asarray(x) for x in self.fn(*wide)]
        self.last = (args, outs)
        return outs


def region_validate(original: dict[str, Any], optimized: dict[str, Any], plan: RegionPlan,
                    comparison: Comparison, trials: int, seed: int, draws: InputDraws | None) -> dict[str, Any]:
    """Per trial, one jitted call runs the original only as far as the regions need and each region
    on the values the original feeds it (one compile for all: XLA's fixed cost per module is
    larger than a small region's); each region's results are compared with the original's values.
    Regions that are the same check (`check_key`: an encoder's layers) run once: the earliest of them."""
    checks: dict[str, Region] = {}
    for region in sorted(plan.regions, key=lambda r: max(r.eqns, default=-1)):  # the earliest of each kind:
        checks.setdefault(check_key(original, optimized, region, plan), region)  # the original runs that far
    wanted = list(dict.fromkeys(o for r in checks.values() for o in [*(o for o, _ in r.roots),
                                                                      *(o for _, o in r.boundary)]))
    needed = cone(original, wanted)  # the original up to those regions, and only the inputs it reads
    inputs = [s["name"] for s in needed["inputs"]]
    run_original = program_to_callable(needed)
    calls = [(program_to_callable(region.subprogram(optimized, plan.numbered)), region) for region in checks.values()]

    @jax.jit
    def run(*args):
        values = dict(zip(inputs, args))
        values.update(zip(wanted, run_original(*args)))
        return [([values[o] for o, _ in region.roots], fn(*[values[o] for _, o in region.boundary]))
                for fn, region in calls]

    for trial in range(trials):
        for refs, results in run(*random_inputs(needed, seed + trial, scaled=True, draws=draws)):
            for ref, res in zip(refs, results):
                comparison.check(ref, res, None)  # no float64 here: doubt goes to the whole run
        if comparison.failed:
            break  # the whole run decides; more region trials would not change that
    return comparison.result(trial + 1, criterion="regions", regions=len(plan.regions),
                             distinct_regions=len(checks), region_share=round(plan.share, 4))
