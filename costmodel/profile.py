"""`HardwareProfile`: a validated, frozen description of a target, loaded from costmodel/profiles/*.toml.

Every error a user can cause (missing file, bad TOML, missing/unknown/out-of-range field, unknown
override) is a `ProfileError` whose message names the file or source and the dotted field.
"""

from __future__ import annotations

import functools
import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from costmodel.measured_gemm import grid_axes
from costmodel.provenance import Basis, fields, overridden

PROFILES_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "optu-v1"  # the target a request that names none is priced on

# Rates, sizes and clocks must be strictly positive (they divide); energies and latencies may be 0
# so a profile can switch a term off (e.g. a host with no laser), but never go negative.
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Count = Annotated[int, Field(gt=0)]

_REDUCTIONS = (
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_and",
    "reduce_or",
    "argmax",
    "argmin",
)

# JAX primitive names that share a flop weight with a generic kind listed in a profile, so a
# profile stays short and a new comparison or reduction primitive still gets a sensible weight.
_KIND_OF: dict[str, str] = {
    **{op: "compare" for op in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{op: "reduce" for op in _REDUCTIONS},
    "select_n": "select",
    "exp2": "exp",
    "expm1": "exp",
    "log1p": "log",
}


class ProfileError(ValueError):
    """A hardware profile could not be loaded or validated; `field` is the dotted field, if any."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GemmUnit(_Section):
    """Weight-stationary optical GEMM cores: an R x C weight tile per core, P cores, clock f."""

    rows: Count  # R: output columns (N) computed per tile
    cols: Count  # C: reduction length (K) per tile
    cores: Count  # P
    clock_hz: Positive  # f: input rows streamed per second per core
    weight_load_s: NonNegative  # T_w: time to program one tile
    weight_load_overlap: Annotated[float, Field(ge=0, le=1)]  # fraction of T_w hidden by double-buffering
    dac_bits: Count
    adc_bits: Count
    dac_energy_j: NonNegative  # per input conversion
    adc_energy_j: NonNegative  # per output conversion
    weight_cell_energy_j: NonNegative  # per weight cell programmed
    laser_power_w: NonNegative  # drawn while the cores run
    # Optional terms, zero/absent on hardware without them (so older profiles stay valid):
    call_overhead_s: NonNegative = 0.0  # fixed time per GEMM op (a CPU's GEMM library call)
    conv_overhead_s: NonNegative = 0.0  # fixed time per convolution op (its setup on a CPU)
    # Output positions per second a convolution's patch gather (im2col) sustains: it bounds a
    # convolution with few features; None: the gather is free (the implicit GEMM streams patches).
    conv_positions_per_s: Positive | None = None
    # Throughput by operand type, relative to the rate the tiles and clock describe (1: that rate),
    # keyed by `gemm_operand_class`: a dtype ("bfloat16", "float32") or "float32_highest" (float32
    # at HIGHEST precision); "default" for the unlisted. Empty: every type at the clock's rate. A
    # GPU's tensor cores run float32 at default precision as TF32, slower than bf16, and at HIGHEST
    # as float32 on the CUDA cores, slower still.
    precision_rates: dict[str, Positive] = Field(default_factory=dict)
    # Measured seconds of fp32 (m x k) @ (k x n) products over a grid of shapes, as [m, k, n, s]
    # rows (costmodel/measured_gemm.py); where given, a GEMM is priced from them instead of the
    # tiles and clock. Empty: the tile model prices every GEMM.
    shape_times_s: tuple[tuple[Count, Count, Count, Positive], ...] = ()

    @field_validator("shape_times_s")
    @classmethod
    def _full_grid(cls, times: tuple) -> tuple:
        if times:
            grid_axes(times)
        return times

    def rate(self, operand_class: str) -> float:
        """The throughput of GEMMs on `operand_class` operands relative to the clock's rate."""
        dtype = operand_class.removesuffix("_highest")
        return self.precision_rates.get(operand_class, self.precision_rates.get(
            dtype, self.precision_rates.get("default", 1.0)))

    def __hash__(self) -> int:  # the dict field would make pydantic's frozen hash fail
        return hash(tuple((k, v) for k, v in self.model_dump().items() if k not in ("precision_rates", "shape_times_s"))
                    + tuple(sorted(self.precision_rates.items())) + self.shape_times_s)


class VectorUnit(_Section):
    """Electronic vector unit for elementwise ops, reductions and transcendentals."""

    flops_per_s: Positive
    energy_per_flop_j: NonNegative
    op_weights: dict[str, Positive]  # flops per element, by op kind; must contain "default"

    @field_validator("op_weights")
    @classmethod
    def _has_default(cls, weights: dict[str, float]) -> dict[str, float]:
        if "default" not in weights:
            raise ValueError("must contain a 'default' weight for unlisted ops")
        return weights

    def weight(self, op: str) -> float:
        """Flops per element of `op`: its own entry, else its kind's, else the default."""
        if op in self.op_weights:
            return self.op_weights[op]
        return self.op_weights.get(_KIND_OF.get(op, ""), self.op_weights["default"])

    def __hash__(self) -> int:  # the dict field would make pydantic's frozen hash fail
        return hash((self.flops_per_s, self.energy_per_flop_j, tuple(sorted(self.op_weights.items()))))


class MemorySystem(_Section):
    sram_bytes: Positive
    # On-chip bytes one block of a blocked kernel may hold where one program instance sees less
    # than the whole SRAM (a GPU's per-SM shared memory; its L2 is sram_bytes). None: all of it.
    block_bytes: Annotated[float | None, Field(gt=0)] = None
    sram_bw_bytes_per_s: Positive
    sram_energy_per_byte_j: NonNegative
    hbm_bw_bytes_per_s: Positive
    hbm_energy_per_byte_j: NonNegative
    # Optional cache in front of HBM (a CPU's last-level cache): the first cache_bytes of a kernel's
    # boundary traffic move at cache_bw_bytes_per_s, the rest at HBM speed. 0: no such cache.
    cache_bytes: NonNegative = 0.0
    cache_bw_bytes_per_s: Annotated[float | None, Field(gt=0, validate_default=True)] = None

    @field_validator("cache_bw_bytes_per_s")
    @classmethod
    def _cache_has_bandwidth(cls, bw: float | None, info: ValidationInfo) -> float | None:
        if bw is None and info.data.get("cache_bytes", 0) > 0:
            raise ValueError("required when cache_bytes > 0")
        return bw


class KernelParams(_Section):
    launch_overhead_s: NonNegative
    # Once per call of the whole program, however many kernels it runs (optional): the host
    # dispatching it and waiting for its result (a jitted call from Python on a GPU).
    dispatch_overhead_s: NonNegative | None = None
    loop_iteration_s: NonNegative = 0.0  # control cost of one scan/while iteration (optional)
    # Per buffer beyond the one input and one output that launch_overhead_s covers (optional):
    # setting up each further transfer (a DMA descriptor; on a CPU, handing over or allocating it).
    input_overhead_s: NonNegative = 0.0
    output_overhead_s: NonNegative = 0.0
    # Whether weight-only work runs once per weight set, ahead of the calls (a deployment step on
    # the OPTU). False where nothing does that: a plain jax.jit recomputes it on every call.
    precompute_weights: bool = True
    # GEMMs one kernel may run back to back, each reading the one before from SRAM (a chain, an
    # RNN's steps). 1 where a kernel is one library GEMM plus epilogues (cuBLAS, XLA).
    max_gemms: Count = 1
    # Whether a Pallas kernel runs compiled here as one kernel (Triton on an NVIDIA GPU), so a kernel
    # of more GEMMs returned as one is what runs; false where Pallas only interprets (a CPU).
    pallas_compiled: bool = False
    # Who groups a returned program into the kernels that run: "chosen", this compiler (the OPTU
    # runs the kernels a response lists); "xla", XLA compiling it (a CPU, a GPU), which fuses it its
    # own way, so programs are priced as XLA groups them, but for fused kernels a program carries.
    fusion: Literal["chosen", "xla"] = "chosen"
    # Under XLA's fusion, required there: whether elementwise ops after a GEMM run inside its kernel
    # (a GPU's GEMM epilogues); false where a GEMM is a library call of its own (XLA:CPU).
    gemm_epilogue: bool | None = None

    @model_validator(mode="after")
    def _xla_fusion_says_how_gemms_fuse(self) -> KernelParams:
        if self.fusion == "xla" and self.gemm_epilogue is None:
            raise ValueError("gemm_epilogue is required when fusion is \"xla\"")
        return self


class HardwareProfile(_Section):
    name: Annotated[str, Field(min_length=1)]
    description: str
    # The least estimated speedup over the baseline worth returning: below it the estimates cannot
    # tell the programs apart (a measured profile's error), and the baseline's program is returned
    # (the original as a conventional compiler simplifies it).
    min_speedup: Annotated[float, Field(ge=1.0)] = 1.0
    gemm: GemmUnit
    vector: VectorUnit
    memory: MemorySystem
    kernel: KernelParams
    # Where each number comes from, by dotted field (costmodel/provenance.py): shipped profiles label
    # every number; a request's own profile may leave it empty. Never part of a cost.
    provenance: dict[str, Basis] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _labels_name_numbers(self) -> HardwareProfile:
        unknown = sorted(set(self.provenance) - set(fields(self)))
        if unknown:
            raise ValueError(f"provenance names no field of the profile: {', '.join(unknown)}")
        return self

    def costs(self) -> dict[str, Any]:
        """The profile without its provenance: what a request's hash and a cost depend on."""
        return self.model_dump(mode="json", exclude={"provenance"})

    def __hash__(self) -> int:  # the dict fields would make pydantic's frozen hash fail
        return hash(json.dumps(self.costs(), sort_keys=True))


def _describe(err: dict[str, Any]) -> tuple[str, str]:
    """(dotted field, human reason) for one pydantic error."""
    field = ".".join(str(part) for part in err["loc"]) or "<root>"
    if err["type"] == "missing":
        return field, "missing required field"
    if err["type"] == "extra_forbidden":
        return field, "unknown field"
    return field, f"{err['msg']} (got {err.get('input')!r})"


def profile_from_dict(data: dict[str, Any], source: str = "<dict>") -> HardwareProfile:
    """Validate a plain dict (e.g. a request's inline profile); errors name `source` and the field."""
    if not isinstance(data, dict):
        raise ProfileError(f"profile {source}: expected a table/object, got {type(data).__name__}")
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err) for err in exc.errors()]
        detail = "; ".join(f"field '{field}': {reason}" for field, reason in problems)
        raise ProfileError(f"profile {source}: {detail}", field=problems[0][0]) from None


def _load_file(path: Path) -> HardwareProfile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"profile file {path}: cannot read ({exc.strerror})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile file {path}: TOML syntax error: {exc}") from None
    return profile_from_dict(data, source=f"file {path}")


def list_profiles() -> list[str]:
    """Names of the shipped profiles (file stems in costmodel/profiles/), sorted."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.toml"))


@functools.lru_cache(maxsize=None)
def _load_named(name: str) -> HardwareProfile:
    path = PROFILES_DIR / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(list_profiles())
        raise ProfileError(f"no hardware profile named '{name}' (no file {path}); known: {known}")
    return _load_file(path)


def load_profile(name_or_path: str) -> HardwareProfile:
    """Load a shipped profile by name (cached) or any TOML file by path (read every time)."""
    if name_or_path.endswith(".toml") or "/" in name_or_path or "\\" in name_or_path:
        path = Path(name_or_path)
        if not path.is_file():
            raise ProfileError(f"profile file {path}: not found")
        return _load_file(path)
    return _load_named(name_or_path)


def resolve_profile(hardware: str | dict | HardwareProfile | None) -> HardwareProfile:
    """A profile given as an object, an inline dict, a shipped name or path, or None (the default)."""
    if isinstance(hardware, HardwareProfile):
        return hardware
    if isinstance(hardware, dict):
        return profile_from_dict(hardware, source="request hardware")
    return load_profile(hardware or DEFAULT_PROFILE)


def with_overrides(profile: HardwareProfile, overrides: dict[str, Any]) -> HardwareProfile:
    """A copy of `profile` with dotted-name overrides, e.g. {"gemm.rows": 128}; revalidated."""
    data = profile.model_dump()
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                raise ProfileError(
                    f"override '{dotted}': unknown field '{'.'.join(parts[: depth + 1])}'", field=dotted
                )
        # op_weights and precision_rates are open tables: any op kind or operand type may be added;
        # everywhere else names are fixed.
        open_table = parts[:-1] in (["vector", "op_weights"], ["gemm", "precision_rates"])
        if parts[-1] not in node and not open_table:
            raise ProfileError(f"override '{dotted}': unknown field", field=dotted)
        if isinstance(node.get(parts[-1]), dict):
            raise ProfileError(
                f"override '{dotted}': is a section; override its fields instead", field=dotted
            )
        node[parts[-1]] = value
    data["provenance"] = overridden(data["provenance"], list(overrides))
    return profile_from_dict(data, source=f"'{profile.name}' with overrides")
