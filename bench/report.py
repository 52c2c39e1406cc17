"""Shared output helpers for the benchmark scripts: machine description, results JSON, the tables
of docs/benchmarks.md between marker comments, and number formatting."""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
BENCHMARKS_PAGE = ROOT / "docs" / "benchmarks.md"
# A missing marker pair goes after the last of these present: tables appear in `make bench` order.
ANCHORS = ("<!-- mutation:end -->", "<!-- cpu_speed:end -->", "<!-- speed:end -->", "<!-- bench:end -->")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "n/a"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=5)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=5).stdout.splitlines()
        # The benchmarks' own outputs do not make the measured code dirty.
        dirty = [line for line in changed if not line[3:].startswith(("docs/benchmarks.md", "bench/results/"))]
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "n/a"
    except (OSError, subprocess.SubprocessError):
        return "n/a"


def machine() -> dict[str, Any]:
    """Where and with what the numbers were measured (timings mean nothing without it)."""
    from service import VERSION
    return {"python": platform.python_version(), "machine": platform.machine(), "processor": _cpu_model(),
            "cpus": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
            "jax": _version("jax"), "jaxlib": _version("jaxlib"), "egglog": _version("egglog"),
            "numpy": _version("numpy"), "scipy": _version("scipy"), "optu_eqsat": VERSION,
            "commit": _git_commit()}


def machine_line(meta: dict[str, Any]) -> str:
    return (f"{meta['processor']} ({meta['cpus']} CPUs, {meta['machine']}), Python {meta['python']}, "
            f"jax {meta['jax']}, egglog {meta['egglog']}")


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def publish(path: Path, payload: dict[str, Any], text: str, section: str, docs: bool = True) -> None:
    """A benchmark's results: the JSON file, the table printed, and its table in docs/benchmarks.md
    between `<!-- {section}:begin -->` and `<!-- {section}:end -->` regenerated (unless `docs` is off)."""
    write_json(path, payload)
    print(text)
    if docs:
        update_table(text, f"<!-- {section}:begin -->", f"<!-- {section}:end -->")


def update_table(text: str, begin: str = "<!-- bench:begin -->", end: str = "<!-- bench:end -->",
                 page: Path = BENCHMARKS_PAGE) -> None:
    """Replace the text between two marker comments; a missing pair is added after the benchmark
    tables already there (`ANCHORS`)."""
    content = page.read_text()
    if begin not in content or end not in content:
        anchor = next((a for a in ANCHORS if a in content), None)
        if anchor is None:
            return
        head, tail = content.split(anchor, 1)
        content = f"{head}{anchor}\n\n{begin}\n{end}{tail}"
    head, rest = content.split(begin, 1)
    page.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")


def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def rank_agreement(estimated: list[float], measured: list[float], changed: list[bool]) -> dict[str, Any]:
    """How well estimated speedups rank as the measured ones do: Spearman's correlation over every
    program, and over those the optimizer changed (an unchanged one's ratio is the machine's noise)."""
    kept = lambda xs: [x for x, c in zip(xs, changed) if c]  # noqa: E731
    return {"spearman": spearman(estimated, measured), "spearman_changed": spearman(kept(estimated), kept(measured)),
            "changed": sum(changed)}


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank); NaN below three pairs or where
    either side is constant."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs pairs, got {len(xs)} and {len(ys)} values")
    if len(xs) < 3:
        return math.nan
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else math.nan


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):  # a run of equal values shares its mean rank
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2
        start = end + 1
    return ranks


def fmt_si(value: float | None, unit: str) -> str:
    """`value` with the largest of the prefixes (T, G, M, none, m, u) that keeps it >= 1, else n."""
    if value is None:
        return "n/a"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("", 1.0), ("m", 1e-3), ("u", 1e-6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value * 1e9:.3g} n{unit}"


def fmt_time(seconds: float | None) -> str:
    return fmt_si(seconds, "s")


def fmt_energy(joules: float | None) -> str:
    return fmt_si(joules, "J")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"
