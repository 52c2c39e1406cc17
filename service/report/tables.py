"""The report's tables as plain rows, formatted from an optimize response: estimates against the
baselines, the validation verdict, the rewrites applied, the e-graph and extraction statistics."""
from __future__ import annotations

from lowering.kernel_json import EstimatesJSON
from service.report.style import BOUND_LABELS, seconds, size
from validation.response_json import ReportJSON
from validation.verdict import Verdict

ESTIMATES = (("naive", "naive: one kernel per equation"), ("baseline", "baseline: conventional compiler"),
             ("optimized", "optimized"), ("precompute", "precompute: once per weight set"),
             ("lower_bound", "lower bound: no returned program is faster"))


# Where XLA compiles the programs (`priced_as: xla`), the conventional compiler is XLA itself and
# both programs run in the kernels it groups them into.
AS_XLA_RUNS = {"baseline": "baseline: XLA, in its own kernels", "optimized": "optimized: in XLA's kernels"}


def estimate_rows(estimate: EstimatesJSON) -> list[dict[str, str]]:
    """One row per program the response estimates, with its time relative to the optimized one."""
    optimized_s = estimate["optimized"]["time_s"]
    labels = {**dict(ESTIMATES), **(AS_XLA_RUNS if estimate.get("priced_as") == "xla" else {})}
    rows = []
    for key, label in labels.items():
        est = estimate.get(key)
        if est is None:
            continue
        ratio = est["time_s"] / optimized_s if optimized_s and key not in ("optimized", "precompute") else None
        rows.append({"program": label, "time": seconds(est["time_s"]), "energy": f"{est['energy_j']:.3g} J",
                     "hbm": size(est["hbm_bytes"]), "flops": f"{est['flops']:.3g}", "bound": BOUND_LABELS[est["bound"]],
                     "vs_optimized": "" if ratio is None else f"{ratio:.3f}x"})
    return rows


def validation_rows(validation: Verdict) -> list[tuple[str, str]]:
    """(fact, value) pairs of the numerical check, those the response carries."""
    error = validation.get("max_rel_error")
    rows = [("verdict", validation["status"]), ("max relative error", "n/a" if error is None else f"{error:.3g}"),
            ("draws compared", str(validation.get("trials", 0)))]
    if validation.get("criterion"):
        rows.append(("criterion", validation["criterion"]))
    if validation.get("tolerance"):
        rows.append(("tolerance", ", ".join(f"{k} {v:.3g}" for k, v in validation["tolerance"].items())))
    if validation.get("reason"):
        rows.append(("reason", validation["reason"]))
    return rows


def rewrite_rows(report: ReportJSON) -> list[tuple[str, int]]:
    """Rules applied, most often first: the response counts firings, not time saved per rule."""
    fired = [(rule, count) for rule, count in report["rewrites"].items() if count > 0]
    return sorted(fired, key=lambda item: (-item[1], item[0]))


def search_rows(report: ReportJSON) -> list[tuple[str, str]]:
    """(fact, value) pairs of the e-graph, extraction and kernel choice."""
    egraph, extraction = report["egraph"], report["extraction"]
    rows = [("stop reason", egraph["stop_reason"]), ("e-nodes", _count(egraph.get("enodes"))),
            ("e-classes", _count(egraph.get("eclasses"))), ("iterations", _count(egraph.get("iterations")))]
    if egraph.get("fusion"):
        fusion = egraph["fusion"]
        rows.append(("kernel e-graph", f"{fusion['enodes']} e-nodes, {fusion['eclasses']} e-classes, "
                                       f"{fusion['rounds']} fusion rounds"))
    gap = extraction.get("optimality_gap")
    rows += [("extraction", f"{extraction.get('method') or 'none'} ({extraction.get('status')})"),
             ("optimality gap", "n/a" if gap is None else f"{gap:.3g}")]
    if report.get("fusion") and report["fusion"].get("chosen"):
        rows.append(("kernels chosen from", str(report["fusion"]["chosen"])))
    equations = report.get("equations") or {}
    if equations:
        rows.append(("equations", f"{equations['original']} -> {equations['optimized']}"))
    rows += [(f"time in {stage}", seconds(s)) for stage, s in report.get("timings_s", {}).items()]
    return rows


def _count(value: int | None) -> str:
    return "n/a" if value is None else str(value)
