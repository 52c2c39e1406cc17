"""`optu debug`: an optimized program run kernel by kernel against its original (in-process or through a
server's /v1/debug), printed as a table with the first diverging kernel, its rewrites and the rules to blame."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from service.client import debug_programs
from validation.debug_json import DebugJSON
from wire.json_types import Program

EXIT_OK, EXIT_DIVERGES = 0, 1


def add_debug_command(commands: Any, exit_codes_help: str, load_request: Callable[[str], dict[str, Any]]) -> None:
    """The `debug` subcommand on the `optu` parser's subcommands; `load_request` reads ORIGINAL (a wire
    program or a request body) as the other commands read their files."""
    dbg = commands.add_parser("debug", help="run ORIGINAL and OPTIMIZED kernel by kernel on the same inputs and name "
                                            "the first kernel that diverges and its rewrites",
                              epilog=exit_codes_help, formatter_class=argparse.RawDescriptionHelpFormatter)
    dbg.add_argument("original", metavar="ORIGINAL.json", help="a wire program or a request body (its hardware and "
                                                                "options are used to re-optimize for --bisect-rules)")
    dbg.add_argument("optimized", metavar="OPTIMIZED.json",
                     help="`optu optimize --json` output (its kernels and rewrites are used), or a wire program; "
                          "where validation failed, optimize with options {\"validate\": false} to keep the candidate")
    dbg.add_argument("--bisect-rules", action="store_true",
                     help="re-optimize ORIGINAL with subsets of the rules that fire (delta debugging) to find a "
                          "minimal set whose application makes validation fail, and the kernel it builds")
    dbg.add_argument("--bisect-seconds", type=float, metavar="S",
                     help="budget of the bisection: then the smallest failing rule set so far is the answer "
                          "(default: none in-process, the server's maximum time limit with --server)")
    dbg.add_argument("--hardware", metavar="NAME", help="profile name (default: ORIGINAL's, else the default)")
    dbg.add_argument("--seed", type=int, default=0, help="seed of the input draw the kernels are compared on")
    dbg.add_argument("--server", metavar="URL", help="POST to this server's /v1/debug instead of running in-process")
    dbg.add_argument("--json", action="store_true", help="print the whole report")
    dbg.set_defaults(run=lambda args: _debug(args, load_request(args.original)))


BLAMED = ("found", "time_limit")  # bisection statuses that name rules making validation fail


def _debug(args: argparse.Namespace, original: Program) -> int:
    optimized = json.loads(Path(args.optimized).read_text(encoding="utf-8"))
    if not isinstance(optimized, dict):
        raise ValueError(f"{args.optimized}: expected a JSON object, got {type(optimized).__name__}")
    kernels = rewrites = provenance = None
    if "kernels" in optimized:  # an optimize response: its kernels and the rules that fired
        kernels = [*({**k, "precompute": True} for k in optimized.get("precompute_kernels", [])),
                   *optimized["kernels"]]
        rewrites = optimized.get("report", {}).get("rewrites")
        provenance = optimized.get("provenance")
    report = debug_programs(original["program"], optimized.get("program", optimized), kernels=kernels,
                            rewrites=rewrites, provenance=provenance, server=args.server,
                            hardware=args.hardware or original.get("hardware"), options=original.get("options"),
                            bisect_rules=args.bisect_rules, bisect_time_limit_s=args.bisect_seconds, seed=args.seed)
    print(json.dumps(report, indent=2) if args.json else debug_table(report))
    blamed = (report.get("bisection") or {}).get("status") in BLAMED
    return EXIT_DIVERGES if report["first_divergent"] is not None or blamed else EXIT_OK


def debug_table(report: DebugJSON) -> str:
    """One row per kernel in execution order (the first diverging one marked), then the summary and
    the bisection's answer."""
    header = ["kernel", "ops", "max rel error", "tolerance", "verdict", "rewrites"]
    rows = []
    for k in report["kernels"]:
        error = "-" if k["max_rel_error"] is None else f"{k['max_rel_error']:.3g}"
        tolerance = f"{max((o['tolerance'] for o in k['outputs']), default=0):g}"
        first = report["first_divergent"] is not None and (k["id"], k["precompute"]) == (
            report["first_divergent"]["id"], report["first_divergent"]["precompute"])
        mark = "FIRST DIVERGENT" if first else ("diverges" if k["diverges"] else "ok")
        rows.append([("p" if k["precompute"] else "") + str(k["id"]), " -> ".join(k["ops"]), error, tolerance, mark,
                     ", ".join(k["rewrites"]) or "-"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    lines.append(report["summary"])
    lines.append(f"validation: {report['validation']['status']}: {report['validation']['reason']}")
    bisection = report.get("bisection")
    if bisection and bisection["status"] in BLAMED:
        kernel = bisection["kernel"]
        built = (f"; they built kernel {kernel['id']} ({' -> '.join(kernel['ops'])})" if kernel
                 else "; with them alone no kernel diverges on this draw")
        unfinished = ", out of time before each was shown needed" if bisection["status"] == "time_limit" else ""
        lines.append(f"bisect: {', '.join(bisection['rules']) or 'no rule (the failure needs none)'} make validation "
                     f"fail ({bisection['configurations']} rule sets tried{unfinished}){built}")
    elif bisection:
        lines.append("bisect: validation does not fail with every rule applied: no rule to blame")
    return "\n".join(lines)


