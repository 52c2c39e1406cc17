"""`python -m bench.profile_table`: the shipped hardware profiles' figures and where they come from,
read from their TOML files, as the tables of docs/hardware-profiles.md (between
`<!-- profiles:begin/end -->`), so the page never states a number the profiles do not hold."""
from __future__ import annotations

import argparse
from collections import Counter
from typing import Callable

from bench.report import ROOT, fmt_bytes, fmt_si, fmt_time, update_table
from costmodel.formulas import gemm_cost
from costmodel.profile import HardwareProfile, list_profiles, load_profile
from costmodel.provenance import Basis, numbers

PAGE = ROOT / "docs" / "hardware-profiles.md"
KINDS = ("measured", "published", "by definition", "assumed")
# The one outside figure optu-v1's energy is checked against (no OPTU exists to measure).
ENERGY_REFERENCE = "about 1.2 pJ per operation measured on Lightmatter's photonic processor (Nature 2025)"
ENERGY_CHECK_GEMM = (512, 4096, 4096)  # m, k, n: a large layer's product, weights stationary


def basis_kind(basis: Basis) -> str:
    """`measured` (on the machine the profile describes: by `optu calibrate` or on the GPU itself),
    `by definition` (of the mapping or the deployment), `published` (any other checkable source,
    a paper's measurement included) or `assumed`."""
    if basis.assumed:
        return "assumed"
    source = basis.source or ""
    if source.startswith(("measured on ", "measured by ")):
        return "measured"
    return "by definition" if source.startswith("by definition") else "published"


# The figures the prose talks about, each a dotted field and how to show its value.
FIGURES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("gemm.rows", "GEMM tile rows", lambda v: f"{v:g}"),
    ("gemm.cols", "GEMM tile columns", lambda v: f"{v:g}"),
    ("gemm.cores", "GEMM cores", lambda v: f"{v:g}"),
    ("gemm.clock_hz", "GEMM clock", lambda v: fmt_si(v, "Hz")),
    ("gemm.weight_load_s", "weight tile load", fmt_time),
    ("gemm.precision_rates.bfloat16", "GEMM rate, bf16", lambda v: fmt_si(v, "FLOP/s")),
    ("gemm.precision_rates.float32", "GEMM rate, float32 (default precision)", lambda v: fmt_si(v, "FLOP/s")),
    ("gemm.precision_rates.float32_highest", "GEMM rate, float32 HIGHEST", lambda v: fmt_si(v, "FLOP/s")),
    ("vector.flops_per_s", "vector unit", lambda v: fmt_si(v, "FLOP/s")),
    ("memory.sram_bytes", "on-chip memory (SRAM / L2 / last-level cache)", fmt_bytes),
    ("memory.block_bytes", "one block's on-chip memory (a GPU SM's shared memory)", fmt_bytes),
    ("memory.sram_bw_bytes_per_s", "on-chip bandwidth", lambda v: fmt_si(v, "B/s")),
    ("memory.hbm_bw_bytes_per_s", "off-chip bandwidth (HBM / DRAM)", lambda v: fmt_si(v, "B/s")),
    ("kernel.launch_overhead_s", "cost per kernel", fmt_time),
    ("kernel.dispatch_overhead_s", "cost per call (dispatch)", fmt_time),
    ("kernel.max_gemms", "GEMMs a kernel may chain", lambda v: f"{v:g}"),
)


def _rates_absolute(profile: HardwareProfile) -> dict[str, float]:
    """`gemm.precision_rates` are relative to the clock's peak; shown as FLOP/s."""
    g = profile.gemm
    peak = 2.0 * g.rows * g.cols * g.cores * g.clock_hz
    return {f"gemm.precision_rates.{k}": peak * v for k, v in g.precision_rates.items()}


def _cell(profile: HardwareProfile, field: str, show: Callable[[float], str]) -> str:
    values = {**numbers(profile), **_rates_absolute(profile)}
    if field not in values or field not in profile.provenance:
        return "-"
    return f"{show(values[field])} ({basis_kind(profile.provenance[field])})"


def counts_table(profiles: dict[str, HardwareProfile]) -> str:
    rows = ["| profile | numbers | " + " | ".join(KINDS) + " |", "|---|---:|" + "---:|" * len(KINDS)]
    for name, profile in profiles.items():
        kinds = Counter(basis_kind(profile.provenance[f]) for f in numbers(profile))
        rows.append(f"| `{name}` | {sum(kinds.values())} | " + " | ".join(str(kinds[k]) for k in KINDS) + " |")
    return "\n".join(rows)


def figures_table(profiles: dict[str, HardwareProfile]) -> str:
    rows = ["| figure | field | " + " | ".join(f"`{n}`" for n in profiles) + " |",
            "|---|---|" + "---|" * len(profiles)]
    for field, label, show in FIGURES:
        cells = [_cell(p, field, show) for p in profiles.values()]
        if any(c != "-" for c in cells):
            rows.append(f"| {label} | `{field}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def energy_check(profile: HardwareProfile) -> str:
    m, k, n = ENERGY_CHECK_GEMM
    cost = gemm_cost(profile, m, k, n)
    return (f"Energy cross-check: `{profile.name}` prices a {m}x{k}x{n} GEMM at "
            f"{cost.energy_j / cost.flops * 1e12:.2g} pJ per flop; {ENERGY_REFERENCE}.")


def tables() -> str:
    """The page's generated block: counts by kind, the figures, the energy cross-check."""
    profiles = {name: load_profile(name) for name in list_profiles()}
    return "\n\n".join([counts_table(profiles), figures_table(profiles), energy_check(profiles["optu-v1"])])


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/hardware-profiles.md as it is")
    args = parser.parse_args(argv)
    text = tables()
    print(text)
    if not args.no_docs:
        update_table(text, "<!-- profiles:begin -->", "<!-- profiles:end -->", page=PAGE)
    return text


if __name__ == "__main__":
    main()
