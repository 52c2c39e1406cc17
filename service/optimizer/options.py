"""Request options of /v1/optimize (pydantic, so the OpenAPI schema documents them)."""
from __future__ import annotations

from typing import Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator

from costmodel.profile import HardwareProfile
from wire.format import json_int

# What the optimizer uses where a request leaves a limit unset; a server may set its own defaults
# and caps (service/http/settings.py) and passes the options it resolved.
DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_NODE_LIMIT = 50_000


def _rule_names() -> list[str]:
    """The names `exclude_rules` accepts, for the schema; built only when the schema is (the rulesets are built)."""
    from rewrites.schedule import ALGEBRA_RULE_NAMES

    return sorted(ALGEBRA_RULE_NAMES)


class OptionsJSON(TypedDict, total=False):
    """The options as a request writes them (keys by alias); any left out take their defaults."""

    time_limit_s: float | None
    node_limit: int | None
    iter_limit: int
    extraction: Literal["auto", "greedy", "ilp"]
    fp_mode: Literal["exact", "real"]
    validate: bool
    lowering: Literal["xla", "pallas"]
    rules: bool
    exclude_rules: list[str]


class OptimizeOptions(BaseModel):
    # A misspelt option is an error, not ignored; `0` is not `false` nor "5" a number.
    model_config = ConfigDict(extra="forbid", strict=True)

    time_limit_s: float | None = Field(None, gt=0, description="saturation budget; server default and maximum apply")
    node_limit: json_int(gt=0) | None = Field(None, description="stop saturating beyond this many e-nodes")
    iter_limit: json_int(ge=0) = Field(12, description="saturation iterations")
    extraction: Literal["auto", "greedy", "ilp"] = Field(
        "auto", description="greedy-DAG, exact ILP (HiGHS, warm-started from greedy), or auto: the ILP when "
                            "the e-graph is small enough to finish within the time limit")
    fp_mode: Literal["exact", "real"] = Field(
        "real", description="exact: only rewrites exact in IEEE arithmetic; real: identities of real numbers")
    validate_result: bool = Field(True, alias="validate", description="check optimized vs original numerically")
    lowering: Literal["xla", "pallas"] = Field(
        "xla", description="xla: the program as standard JAX ops, fused by XLA its own way; pallas: each "
                           "key-blocked attention kernel as one fused Pallas kernel and, where the profile "
                           "compiles Pallas, each other fused kernel made apart along its rows (and columns) as one "
                           "Pallas kernel over tiles (interpret mode off a GPU: correct, not fast)")
    rules: bool = Field(True, description="false: round-trip through the e-graph with no rewrites")
    exclude_rules: list[str] = Field(default_factory=list, description="names of algebraic rules that do not run "
                                                                       "(as `report.rewrites` names them)",
                                     json_schema_extra=lambda schema: schema["items"].update(enum=_rule_names()))

    @field_validator("exclude_rules")
    @classmethod
    def _known_rules(cls, names: list[str]) -> list[str]:
        if not names:
            return names
        unknown = sorted(set(names) - set(_rule_names()))  # builds the rulesets: only when rules are named
        if unknown:
            raise ValueError(f"unknown rule(s) {', '.join(unknown)}")
        return sorted(set(names))

    @property
    def key_blocking(self) -> bool:
        """Attention kernels may run key-blocked: the online softmax's identity (a real-mode rule,
        it reorders sums) applied block by block, so only where that rule may run."""
        return self.rules and self.fp_mode == "real" and "softmax-dot-of-concat" not in self.exclude_rules

    def attention_kernels(self, profile: HardwareProfile) -> bool:
        """Whether an attention may be one kernel of its two products: where the profile's kernels
        hold two GEMMs (in any mode: run over blocks of query rows, as the baseline may, and over
        blocks of keys too where `key_blocking`), or where it is returned as one Pallas kernel that
        runs compiled there, key-blocked (a profile whose kernels hold one never prices a kernel
        XLA would split)."""
        return (self.rules and profile.kernel.max_gemms >= 2) or \
            (self.key_blocking and self.lowering == "pallas" and profile.kernel.pallas_compiled)

    @classmethod
    def names(cls) -> set[str]:
        """The keywords a request sets them by: each field's alias where it has one (`validate`), else its name."""
        return {field.alias or key for key, field in cls.model_fields.items()}

    @classmethod
    def coerce(cls, options: OptimizeOptions | OptionsJSON | None) -> OptimizeOptions:
        """`options` as given, a dict validated, None the defaults."""
        return options if isinstance(options, cls) else cls.model_validate(options or {})

    def resolved(self) -> OptimizeOptions:
        """These options with every unset limit at the optimizer's default: what a search runs
        with, and what a request's id hashes (so leaving a limit unset and giving its default name
        the same request)."""
        return self.model_copy(update={"time_limit_s": self.time_limit_s or DEFAULT_TIME_LIMIT_S,
                                       "node_limit": self.node_limit or DEFAULT_NODE_LIMIT})
