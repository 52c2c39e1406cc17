"""The `optu` console script: serve the API, optimize a wire-program file, list hardware profiles."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import httpx

from service.client import OptimizeError, optimize_program
from service.settings import get_settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app

    settings = get_settings().model_copy(update={k: v for k, v in
                                                 (("host", args.host), ("port", args.port)) if v is not None})
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port)
    return 0


def _load_request(path: str) -> dict[str, Any]:
    """A file holding either a wire program or a whole /v1/optimize request body."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data if "program" in data else {"program": data}


def _summary(response: dict[str, Any]) -> str:
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


def _optimize(args: argparse.Namespace) -> int:
    request = _load_request(args.file)
    hardware = args.hardware or request.get("hardware")
    response = optimize_program(request["program"], server=args.server, hardware=hardware,
                                options=request.get("options"))
    print(json.dumps(response, indent=2) if args.json else _summary(response))
    return 0


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
    parser = argparse.ArgumentParser(prog="optu", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP API (uvicorn)")
    serve.add_argument("--host", help="default: OPTU_HOST")
    serve.add_argument("--port", type=int, help="default: OPTU_PORT")
    serve.set_defaults(run=_serve)

    opt = commands.add_parser("optimize", help="optimize a wire program (or request body) file")
    opt.add_argument("file", metavar="FILE.json")
    opt.add_argument("--hardware", metavar="NAME", help="profile name (default: the file's, else the default)")
    opt.add_argument("--server", metavar="URL", help="POST to this server instead of running in-process")
    opt.add_argument("--json", action="store_true", help="print the whole response")
    opt.set_defaults(run=_optimize)

    hw = commands.add_parser("hardware", help="list hardware profiles")
    hw.add_argument("--server", metavar="URL", help="ask this server instead of the local files")
    hw.set_defaults(run=_hardware)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except OptimizeError as exc:
        print(f"optu: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError, httpx.HTTPError) as exc:
        print(f"optu: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
