"""The `optu` console script: serve the API, run queue workers, optimize a wire-program file, validate one program
against another, debug an optimized program kernel by kernel, sweep hardware parameters, calibrate the cpu-host
profile, list hardware profiles."""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import httpx
from pydantic import ValidationError

from service.cli_debug import add_debug_command
from service.client import OptimizeError, optimize_program, validate_programs
from service.http.settings import Settings, get_settings
from service.jobqueue.states import StatusListener
from validation.response_json import ResponseJSON
from wire.json_types import Program

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_CODES_HELP = """exit codes (every command but `validate`, whose codes its own help gives):
  0  done (`debug`: every kernel agrees with the original within tolerance)
  1  the work failed: the server or the optimizer answered an error, or could not be reached
     (`debug`: a kernel diverges, or --bisect-rules found rules that make validation fail)
  2  bad input: an unreadable file or invalid JSON, a program that does not type-check, an invalid
     option or field, programs whose signatures differ (`debug`), or bad command-line usage

Errors print one line on stderr naming the equation or field. On a terminal, optimize, sweep and
calibrate show live progress on stderr (stage, e-graph size, best estimate so far, elapsed); with
--json they print only the JSON result on stdout."""


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.http.app import create_app

    settings = get_settings().model_copy(update={k: v for k, v in
                                                 (("host", args.host), ("port", args.port)) if v is not None})
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port)
    return 0


def _worker(args: argparse.Namespace) -> int:
    import socket
    import uuid

    from service.jobqueue.broker import Timing
    from service.jobqueue.worker import QueueWorker

    settings = get_settings()
    if not settings.queue_url:
        print("optu: optu worker takes jobs from a queue: set OPTU_QUEUE_URL=redis://host:port/db "
              "(the API replicas' own setting)", file=sys.stderr)
        return 2
    # unique even among containers on one host network, where every worker is pid 1 of one hostname
    name = args.name or f"optu-{uuid.uuid4().hex[:8]}@{socket.gethostname()}"
    worker = QueueWorker(settings.queue_url, Timing(settings.queue_visibility_timeout_s), settings.job_ttl_s,
                         settings.deadline_grace_s, name, settings.warm_up)
    return worker.serve(settings.log_level)


def _load_request(path: str) -> dict[str, Any]:
    """A file holding either a wire program or a whole /v1/optimize request body, or a PyTorch
    ExportedProgram saved by torch.export.save (`.pt2`), captured here."""
    if path.endswith(".pt2"):
        from service.torch_client import load_exported

        return {"program": load_exported(path).program}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data if "program" in data else {"program": data}


def _summary(response: ResponseJSON) -> str:
    est, val, rep = response["estimate"], response["validation"], response["report"]
    eqns = rep.get("equations", {})
    lines = [
        f"hardware      {est['hardware']}",
        f"speedup       {est['speedup_vs_baseline']:.3f}x vs baseline "
        f"({est['baseline']['time_s']:.3e} s -> {est['optimized']['time_s']:.3e} s)",
        f"validation    {val['status']} (max rel error {val.get('max_rel_error')}, "
        f"{val.get('trials')} trials)",
        f"kernels       {len(response['kernels'])}",
    ]
    if eqns:
        lines.append(f"equations     {eqns.get('original')} -> {eqns.get('optimized')}")
    lines += [f"note          {n}" for n in rep.get("notes", [])]
    return "\n".join(lines)


def _live(args: argparse.Namespace) -> bool:
    """Live progress only for a person watching: on a terminal, and never with --json."""
    return not args.json and sys.stderr.isatty()


@contextmanager
def _progress(args: argparse.Namespace, label: str) -> Iterator[StatusListener | None]:
    """A listener showing progress live on stderr (service/cli_progress.py), or None when not `_live`."""
    if not _live(args):
        yield None
        return
    from service.cli_progress import live_progress

    with live_progress(label) as listener:
        yield listener


def _optimize(args: argparse.Namespace) -> int:
    request = _load_request(args.file)
    hardware = args.hardware or request.get("hardware")
    options = {**(request.get("options") or {}), **({"lowering": args.lowering} if args.lowering else {})}
    with _progress(args, f"optimize {Path(args.file).name}") as progress:
        response = optimize_program(request["program"], server=args.server, hardware=hardware,
                                    options=options or None, progress=progress)
    if args.listing:
        print(response["listing"], end="")
    else:
        print(json.dumps(response, indent=2) if args.json else _summary(response))
    if args.report:
        from service.report import render_report  # only this option needs the charting libraries loaded

        Path(args.report).write_text(render_report(response), encoding="utf-8")
        print(f"report written to {args.report}", file=sys.stderr)
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from validation.translation import EXIT_CODES

    try:
        original, candidate = (_load_request(path)["program"] for path in (args.original, args.candidate))
        verdict = validate_programs(original, candidate, server=args.server, fp_mode=args.fp_mode, seed=args.seed)
    except (OptimizeError, OSError, ValueError) as exc:  # 1 and 2 are verdicts: a usage error is neither
        print(f"optu: {error_line(exc)}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(verdict, indent=2))
    else:
        print(f"{verdict['status']}: {verdict['reason']} (max rel error {verdict['max_rel_error']:.3g}, "
              f"{verdict['trials']} trials)")
    return EXIT_CODES[verdict["status"]]


def error_line(exc: BaseException) -> str:
    """One line naming what is wrong: the equation and field of a program that does not type-check,
    the field of an invalid option, else the error's own message."""
    detail = exc.detail if isinstance(exc, OptimizeError) else None
    if isinstance(detail, dict) and "message" in detail:
        where = [f"eqn {detail['eqn']}" if detail.get("eqn") is not None else "", detail.get("field") or ""]
        return ", ".join(w for w in where if w) + ": " + detail["message"] if any(where) else detail["message"]
    if isinstance(detail, list) and detail and isinstance(detail[0], dict) and "loc" in detail[0]:
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in detail)
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _sweep_param(text: str) -> tuple[str, list[int | float]]:
    """`gemm.rows=64,128,256` -> ("gemm.rows", [64, 128, 256])."""
    name, sep, values = text.partition("=")
    try:
        parsed = [_number(v) for v in values.split(",") if v.strip()]
    except ValueError:
        parsed = []
    if not sep or not name or not parsed:
        raise argparse.ArgumentTypeError(f"expected FIELD=V1,V2,... with numbers, got {text!r}")
    return name, parsed


def sweep_table(result: dict[str, Any]) -> str:
    """One row per grid point; `changes` is the chosen program's op delta and its GEMM shapes."""
    names = list(result["params"])
    header = [*names, "optimized", "baseline", "speedup", "kernels", "program", "changes"]
    rows = []
    for p in result["points"]:
        est = p["estimate"]
        delta = " ".join(f"{op}{n:+d}" for op, n in p["op_delta"].items())
        gemms = "gemms " + ",".join(p["gemms"]) if p["gemms"] else ""
        rows.append([*(f"{p['overrides'][n]:g}" for n in names),
                     f"{est['optimized']['time_s'] * 1e6:.3f} us", f"{est['baseline']['time_s'] * 1e6:.3f} us",
                     f"{est['speedup_vs_baseline']:.2f}x", str(p["kernels"]), p["program_digest"][:8],
                     "; ".join(x for x in (delta, gemms) if x) or "-"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    lines.append(f"{result['distinct_programs']} distinct program(s) over {len(rows)} point(s) on "
                 f"{result['hardware']}")
    return "\n".join(lines)


def _sweep(args: argparse.Namespace) -> int:
    request = _load_request(args.file)
    params = dict(args.param)
    if len(params) != len(args.param):
        raise ValueError("--param: each field may be given once")
    body = {"program": request["program"], "hardware": args.hardware or request.get("hardware"),
            "options": request.get("options"), "params": params}
    with _progress(args, f"sweep {Path(args.file).name}") as progress:
        if args.server:  # one request: the live line shows the elapsed time only
            reply = httpx.post(args.server.rstrip("/") + "/v1/sweep", json=body, timeout=600)
            if reply.status_code != 200:
                detail = reply.json().get("detail") if "json" in reply.headers.get("content-type", "") else reply.text
                raise OptimizeError(f"sweep failed ({reply.status_code}): {detail}", status=reply.status_code,
                                    detail=detail)
            result = reply.json()
        else:
            from costmodel.profile import resolve_profile
            from service.optimizer.options import OptimizeOptions
            from service.optimizer.progress import listening
            from service.optimizer.sweep import SweepError, sweep

            try:
                hardware, options = (
                    resolve_profile(body["hardware"]),
                    OptimizeOptions.coerce(body["options"]).resolved(),
                )
                with listening(progress):
                    result = sweep(body["program"], hardware, params, options)
            except SweepError as exc:
                raise OptimizeError(str(exc), status=422, detail={"field": exc.field, "message": str(exc)}) from None
    print(json.dumps(result, indent=2) if args.json else sweep_table(result))
    return EXIT_OK


def _calibrate(args: argparse.Namespace) -> int:
    from costmodel.calibrate import calibrate
    from costmodel.cpu_host_profile import MachineTooLoaded, write_cpu_host_profile
    from service.optimizer.progress import listening, report

    programs = [_checked_program(path) for path in args.check]  # a bad file fails before the measuring
    with _progress(args, "calibrate") as progress, listening(progress):
        report(stage=f"measuring this CPU ({args.seconds:g} s budget)")
        measured = calibrate(args.seconds)
        try:
            share = {} if args.min_cpu_share is None else {"min_cpu_share": args.min_cpu_share}
            path = write_cpu_host_profile(measured, *([args.output] if args.output else []), **share)
        except MachineTooLoaded as reason:
            print(f"optu calibrate: {reason}", file=sys.stderr)
            return EXIT_FAILED
        if programs:
            from service.optimizer.kernel_check import check_kernels

            report(stage=f"timing the kernels of {', '.join(args.check)}")
            checked = check_kernels(programs, str(path), passes=4, budget_per_kernel_s=args.check_seconds)
    if args.json:
        print(json.dumps({"measured": measured, "profile": str(path),
                          "checked": checked if programs else None}, indent=2))
        return EXIT_OK
    print(f"matmul        {measured['matmul']['flops_per_s'] / 1e9:.2f} GFLOP/s\n"
          f"vector        {measured['vector']['flops_per_s'] / 1e9:.2f} GFLOP/s, "
          f"{measured['vector']['sram_bw_bytes_per_s'] / 1e9:.2f} GB/s cached\n"
          f"memory        {measured['memory']['hbm_bw_bytes_per_s'] / 1e9:.2f} GB/s\n"
          f"per call      {measured['overhead']['dispatch_overhead_s'] * 1e6:.2f} us\n"
          f"per kernel    {measured['overhead']['launch_overhead_s'] * 1e6:.2f} us\n"
          f"spread        {measured['spread']:.2f}x (slowest pass over fastest, median probe)\n"
          f"cpu share     {measured['cpu_share']:.2f} of the timing's wall time\n"
          f"wrote         {path}")
    if programs:
        for kind, what in (("baseline", "baseline kernels"), ("optimized", "optimized kernels")):
            k = checked[kind]
            print(f"{what:<18}{k['kernels']} of {', '.join(args.check)}: Spearman {k['spearman']:.3f}, "
                  f"estimate/measured median {k['median_ratio_estimate_over_measured']:.2f} "
                  f"(p10 {k['ratio_p10']:.2f}, p90 {k['ratio_p90']:.2f})")
    return EXIT_OK


def _checked_program(path: str) -> tuple[str, Program, list[Any]]:
    """A program to check the new profile on (a file `optu optimize` reads), type-checked, with
    inputs drawn as validation draws them (scaled like an initialized network)."""
    from validation.inputs import random_inputs
    from wire.execute import typecheck

    program = _load_request(path)["program"]
    typecheck(program)
    return path, program, random_inputs(program, 0, scaled=True)


def _hardware(args: argparse.Namespace) -> int:
    if args.server:
        reply = httpx.get(args.server.rstrip("/") + "/v1/hardware", timeout=30)
        reply.raise_for_status()
        profiles = reply.json()
    else:
        from costmodel.profile import list_profiles, load_profile

        profiles = [{"name": n, "description": load_profile(n).description} for n in list_profiles()]
    width = max((len(p["name"]) for p in profiles), default=0)
    for p in profiles:
        print(f"{p['name']:<{width}}  {p['description']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="optu", description=__doc__, epilog=EXIT_CODES_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP API (uvicorn)")
    serve.add_argument("--host", help="default: OPTU_HOST")
    serve.add_argument("--port", type=int, help="default: OPTU_PORT")
    serve.set_defaults(run=_serve)

    work = commands.add_parser("worker", help="run jobs from the queue at OPTU_QUEUE_URL (any number, any machine)")
    work.add_argument("--name", help="this worker's name (default: optu-RANDOM@HOST)")
    work.set_defaults(run=_worker)

    opt = commands.add_parser("optimize", help="optimize a wire program (or request body) file",
                              epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    opt.add_argument("file", metavar="FILE.json|FILE.pt2", help="a wire program, a request body, or a saved "
                     "torch ExportedProgram")
    opt.add_argument("--hardware", metavar="NAME", help="profile name (default: the file's, else the default)")
    opt.add_argument("--server", metavar="URL", help="POST to this server instead of running in-process")
    opt.add_argument("--lowering", choices=["xla", "pallas"],
                     help="pallas: key-blocked attention as one fused Pallas kernel (default: the file's, else xla)")
    opt.add_argument("--json", action="store_true", help="print the whole response, no progress")
    opt.add_argument("--listing", action="store_true", help="print the kernel program listing")
    opt.add_argument("--report", metavar="OUT.html", help="also write the result's HTML report (self-contained) here")
    opt.set_defaults(run=_optimize)

    sw = commands.add_parser("sweep", help="optimize a program over a grid of hardware parameters")
    sw.add_argument("file", metavar="FILE.json", help="a wire program or a /v1/optimize request body")
    sw.add_argument("--param", type=_sweep_param, action="append", required=True, metavar="FIELD=V1,V2,...",
                    help="a dotted profile field and its values, e.g. gemm.rows=64,128,256; at most twice")
    sw.add_argument("--hardware", metavar="NAME", help="base profile (default: the file's, else the default)")
    sw.add_argument("--server", metavar="URL", help="POST to this server's /v1/sweep instead of running in-process")
    sw.add_argument("--json", action="store_true", help="print the whole result, no progress")
    sw.set_defaults(run=_sweep)

    val = commands.add_parser("validate", help="check that CANDIDATE computes what ORIGINAL does "
                                               "(exit 0 passed or identical, 1 failed, 2 inconclusive, "
                                               "3 not comparable)")
    val.add_argument("original", metavar="ORIGINAL.json", help="a wire program (or a request body holding one)")
    val.add_argument("candidate", metavar="CANDIDATE.json")
    val.add_argument("--fp-mode", choices=["real", "exact"], default="real")
    val.add_argument("--seed", type=int, default=0, help="the first input draw's seed")
    val.add_argument("--server", metavar="URL", help="POST to this server's /v1/validate instead of running in-process")
    val.add_argument("--json", action="store_true", help="print the whole verdict")
    val.set_defaults(run=_validate)

    add_debug_command(commands, EXIT_CODES_HELP, _load_request)

    cal = commands.add_parser("calibrate", help="measure this CPU with JAX and write the cpu-host profile")
    cal.add_argument("--seconds", type=float, default=20, help="measurement budget, compile time excluded")
    cal.add_argument("--output", metavar="PATH", help="default: costmodel/profiles/cpu-host.toml")
    cal.add_argument("--check", nargs="*", default=[], metavar="FILE",
                     help="programs (files `optu optimize` reads) whose kernels, as written in the baseline's "
                          "kernels and as returned, are timed against the new profile's estimates: rank "
                          "correlation and scale")
    cal.add_argument("--check-seconds", type=float, default=0.2, help="timing budget per checked kernel")
    cal.add_argument("--min-cpu-share", type=float, default=None, metavar="SHARE",
                     help="least share of the timing's wall time the measuring process must run for (default "
                          "0.8), else the machine is too loaded to measure: it says so, exits 1 and keeps the "
                          "profile (0: write whatever was measured)")
    cal.add_argument("--json", action="store_true", help="print the measurements and checks as JSON, no progress")
    cal.set_defaults(run=_calibrate)

    hw = commands.add_parser("hardware", help="list hardware profiles")
    hw.add_argument("--server", metavar="URL", help="ask this server instead of the local files")
    hw.set_defaults(run=_hardware)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except OptimizeError as exc:  # the client's mistake (a 4xx) is bad input; anything else, the work failed
        print(f"optu: {error_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT if exc.status is not None and 400 <= exc.status < 500 else EXIT_FAILED
    except ValidationError as exc:
        if exc.title != Settings.__name__:
            raise
        # a bad OPTU_* variable: one line naming it, and a non-zero exit (not a restart loop)
        print("optu: " + "; ".join(f"invalid setting OPTU_{str(e['loc'][0]).upper()}={e['input']!r}: {e['msg']}"
                                   for e in exc.errors()), file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OSError, ValueError) as exc:  # an unreadable file, invalid JSON, a bad argument
        print(f"optu: {error_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except httpx.HTTPError as exc:
        print(f"optu: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
