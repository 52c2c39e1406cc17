"""Python client: `optimize` a JAX function once, or wrap it with the `jax.jit`-like `jit` that
optimizes once per input signature, in-process or through a server."""
from __future__ import annotations

import functools
import json
import threading
import time
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Iterator, Sequence

import httpx
import jax

from lowering.precompute import PrecomputedProgram
from service import torch_client
from service.client_result import ClientResponseJSON, OptimizeError, OptimizeResult
from service.http.api_models import count_equations, error_status, resolve_hardware
from service.http.settings import get_settings, request_options
from service.jobqueue.states import StatusListener
from service.optimizer.caller_heap import CALLER_HEAP
from service.optimizer.options import OptimizeOptions, OptionsJSON
from service.optimizer.progress import listening, stage
from service.optimizer.response import OptimizeResponse
from validation.debug_json import DebugJSON, KernelToCheck
from validation.response_json import ResponseJSON
from validation.verdict import Verdict
from wire.capture import capture, capture_with_trees
from wire.execute import program_to_callable
from wire.json_types import Program
from wire.precision import in_declared_precision

DEFAULT_HARDWARE = "optu-v1"
# What `jit` does when optimizing a signature goes wrong: "fallback" runs plain jax.jit (with a
# warning) on an error, a failed or an inconclusive validation; "raise" raises instead; "accept"
# falls back like "fallback" but uses a result whose validation is inconclusive (with a warning).
ON_ERROR = ("fallback", "raise", "accept")
# Programs this large are sent to a server as jobs (submit, poll): they take seconds, and a job
# survives a dropped connection; smaller ones are answered in one request.
JOB_MIN_EQUATIONS = 200
JOB_POLL_S = 0.2


def optimize_program(program: Program, *, server: str | None = None,
                     hardware: str | dict | None = DEFAULT_HARDWARE, timeout: float = 120,
                     options: OptionsJSON | None = None,
                     progress: StatusListener | None = None) -> ResponseJSON:
    """The /v1/optimize response for a wire program: from `server`, or run in-process. A server is
    sent a job (submitted, then polled, `progress` called with each new status) when `progress` is
    given or the program has JOB_MIN_EQUATIONS equations or more; a small one is POSTed at once.
    In-process, `progress` is called with each of the pipeline's own reports (stage, egraph_nodes,
    best_estimate_s: service/optimizer/progress.py)."""
    body = {"program": program, "hardware": hardware, "options": options or None}
    if server is not None:
        if progress is not None or count_equations(program) >= JOB_MIN_EQUATIONS:
            return _run_job(server, body, timeout, progress)
        return _post(server, body, timeout)
    from service.optimizer import pipeline  # in-process only: keeps the HTTP-only client light to import

    # Through JSON, as a server would see it, so both paths optimize identical data.
    body = json.loads(json.dumps(body))
    settings = get_settings()
    n_eqns = count_equations(body["program"])
    if n_eqns > settings.max_equations:
        detail = {"eqn": None, "field": "program.eqns", "message": f"program has {n_eqns} "
                  f"equations; the limit is {settings.max_equations} (OPTU_MAX_EQUATIONS)"}
        raise OptimizeError(f"optimize failed (422): {detail}", status=422, detail=detail)
    with _client_errors("optimize"), listening(progress):
        resolved = resolve_hardware(body["hardware"], settings.default_hardware)
        raw = pipeline.optimize(body["program"], resolved, request_options(body["options"], settings))
    # The same serialisation the server applies to its response model (non-finite floats -> null).
    return json.loads(OptimizeResponse.model_validate(raw).model_dump_json())


def validate_programs(original: Program, candidate: Program, *, server: str | None = None,
                      fp_mode: str = "real", seed: int = 0, timeout: float = 120) -> Verdict:
    """The /v1/validate verdict on two wire programs: POSTed to `server`, or run in-process."""
    body = {"original": original, "candidate": candidate, "fp_mode": fp_mode, "seed": seed}
    if server is not None:
        return _post(server, body, timeout, "/v1/validate")
    from validation import translation  # in-process only, as for optimize

    with _client_errors("validate"):
        return translation.validate_programs(original, candidate, fp_mode, seed)


def debug_programs(original: Program, optimized: Program, *, kernels: list[KernelToCheck] | None = None,
                   rewrites: dict[str, int] | None = None, provenance: dict[str, str] | None = None,
                   server: str | None = None,
                   hardware: str | dict | None = None, options: OptionsJSON | None = None,
                   bisect_rules: bool = False, bisect_time_limit_s: float | None = None, seed: int = 0,
                   timeout: float = 600) -> DebugJSON:
    """The /v1/debug report (service/optimizer/debug.py) on `optimized` against `original`: POSTed to
    `server`, or run in-process; OptimizeError (422) naming the field when their signatures differ.
    The bisection's budget is `bisect_time_limit_s` (default: the server's maximum time limit; in
    process, none)."""
    body = {"original": original, "optimized": optimized, "kernels": kernels, "rewrites": rewrites,
            "provenance": provenance, "hardware": hardware, "options": options, "bisect_rules": bisect_rules,
            "bisect_time_limit_s": bisect_time_limit_s, "seed": seed}
    if server is not None:
        return _post(server, body, timeout, "/v1/debug")
    from service.optimizer import debug  # in-process only, as for optimize

    settings = get_settings()
    with _client_errors("debug"):
        return debug.debug(original, optimized, resolve_hardware(hardware, settings.default_hardware),
                           request_options(options, settings), kernels, rewrites, bisect_rules, seed,
                           provenance=provenance, bisect_time_limit_s=bisect_time_limit_s)


@contextmanager
def _client_errors(route: str) -> Iterator[None]:
    """In-process, the client's mistakes raise OptimizeError with the status the server would answer."""
    try:
        yield
    except Exception as exc:
        mapped = error_status(exc)
        if mapped is None:
            raise
        raise OptimizeError(f"{route} failed ({mapped[0]}): {mapped[1]}", status=mapped[0],
                            detail=mapped[1]) from exc


def validate(fn_original: Callable[..., Any], fn_candidate: Callable[..., Any], *args: Any,
             server: str | None = None, fp_mode: str = "real", seed: int = 0) -> Verdict:
    """Whether `fn_candidate` computes what `fn_original` does at arguments like `args` (shapes and
    dtypes are what count): both captured and checked by translation validation. The verdict's
    `status` is passed, failed, inconclusive (with the `reason`) or identical."""
    original, candidate = capture(fn_original, *args), capture(fn_candidate, *args)
    return validate_programs(original, candidate, server=server, fp_mode=fp_mode, seed=seed)


def _run_job(server: str, body: dict[str, Any], timeout: float,
             progress: StatusListener | None) -> ResponseJSON:
    """Submit `body` as a job and poll it to its end; past `timeout` the job is cancelled."""
    base = server.rstrip("/")
    job = _answer(_request("post", base + "/v1/jobs", timeout, json=body), "/v1/jobs", (202,))
    deadline, last = time.monotonic() + timeout, None
    while True:
        status = _answer(_request("get", base + job["status_url"], timeout), job["status_url"])
        seen = (status["state"], {k: v for k, v in status["progress"].items() if k != "elapsed_s"})
        if progress is not None and seen != last:  # a change, not just the clock
            progress(status)
        last = seen
        if status["state"] == "succeeded":
            return _answer(_request("get", base + job["result_url"], timeout), job["result_url"])
        if status["state"] in ("failed", "cancelled"):
            raise OptimizeError(f"optimize job {status['state']}: {status['error']}", detail=status["error"])
        if time.monotonic() > deadline:
            _request("delete", base + job["status_url"], timeout)
            raise OptimizeError(f"optimize job did not finish within {timeout:g} s; it was cancelled")
        time.sleep(JOB_POLL_S)


def _request(method: str, url: str, timeout: float, **kwargs: Any) -> httpx.Response:
    try:
        return httpx.request(method, url, timeout=timeout, **kwargs)
    except httpx.HTTPError as exc:
        raise OptimizeError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc


def _post(server: str, body: dict[str, Any], timeout: float, route: str = "/v1/optimize") -> dict[str, Any]:
    return _answer(_request("post", server.rstrip("/") + route, timeout, json=body), route)


def _answer(reply: httpx.Response, route: str, ok: tuple[int, ...] = (200,)) -> dict[str, Any]:
    """The reply's JSON, or OptimizeError with its status and detail."""
    if reply.status_code not in ok:
        try:
            detail = reply.json().get("detail")
        except (ValueError, AttributeError):
            detail = reply.text
        raise OptimizeError(f"{route.rsplit('/', 1)[-1]} failed ({reply.status_code}): {detail}",
                            status=reply.status_code, detail=detail)
    return reply.json()


def _result(response: ClientResponseJSON, in_tree: Any, out_tree: Any, original: Program) -> OptimizeResult:
    """The response with a callable over the pytree arguments `in_tree` describes. Weight-only
    work (weights are constant across calls) runs once per weight set, not on every call."""
    program = response["program"]
    precomputed = PrecomputedProgram.of(program)
    run = precomputed or program_to_callable(program)

    def call(*args: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten(args)
        if tree != in_tree:
            raise TypeError(f"expected arguments structured as {in_tree}, got {tree}")
        return jax.tree_util.tree_unflatten(out_tree, run(*leaves))

    # with a precomputed part the call stays Python, which is where the weight check runs
    fn = in_declared_precision(program, call if precomputed else jax.jit(call))
    return OptimizeResult(response=response, fn=fn, precomputed=precomputed, original=original)


def optimize(fn: Callable[..., Any], *args: Any, server: str | None = None,
             hardware: str | dict | None = DEFAULT_HARDWARE, weight_argnums: Sequence[int] = (),
             timeout: float = 120, progress: StatusListener | None = None,
             **options: Any) -> OptimizeResult:
    """Capture `fn` at `args`, optimize it, and return the result with `.fn` taking the same
    pytree arguments as `fn`. `options` are OptimizeOptions fields (validate=, fp_mode=, ...);
    with a `server`, `progress` is called with the job's status as it changes.

    `fn` may be a PyTorch nn.Module (a Hugging Face transformers model too), a function of torch
    tensors or an ExportedProgram: it is captured here through torch.export (parameters as weights,
    buffers as constants) and `.fn` then takes and returns what the model does (its output
    dataclass and cache object); only the wire program travels to a `server`. Keyword arguments
    that are not OptimizeOptions fields are the model's (`attention_mask=`, `use_cache=`,
    `past_key_values=`). The optimized program is also checked against PyTorch running the
    exported graph (`response["torch_validation"]`); one that disagrees raises OptimizeError."""
    with CALLER_HEAP.out_of_sight():  # capture and the check against PyTorch allocate as much as the search
        return _optimize(fn, args, server, hardware, weight_argnums, timeout, progress, options)


def _optimize(fn: Callable[..., Any], args: tuple, server: str | None, hardware: str | dict | None,
              weight_argnums: Sequence[int], timeout: float,
              progress: StatusListener | None,
              options: dict[str, Any]) -> OptimizeResult:
    model_kwargs = {k: options.pop(k) for k in list(options) if k not in OptimizeOptions.names()}
    stages: dict[str, float] = {}  # the client's own, added to the optimizer's
    with stage(stages, "capture"):
        if torch_client.takes_torch(fn, (args, model_kwargs)):
            captured = torch_client.capture(fn, args, model_kwargs)
        elif model_kwargs:
            raise TypeError(f"optimize() got keyword arguments that are not OptimizeOptions fields: "
                            f"{', '.join(sorted(model_kwargs))} (a JAX function's arguments are passed positionally)")
        else:
            captured = None
        if captured is None:
            program, in_tree, out_tree = capture_with_trees(fn, *args, weight_argnums=weight_argnums)
        else:
            program = captured.program
    response = _timed_request(stages, lambda: optimize_program(program, server=server, hardware=hardware,
                                                               timeout=timeout, options=options, progress=progress))
    if response["validation"]["status"] == "inconclusive":
        warnings.warn(f"optu: the optimized program's validation is inconclusive "
                      f"({response['validation'].get('reason')}); check `.validation` before using `.fn`",
                      RuntimeWarning, stacklevel=3)
    if captured is not None:
        if options.get("validate", True):
            # the reference that matters to a PyTorch user: PyTorch itself, run on the exported graph
            with stage(stages, "validate_torch"):
                response["torch_validation"] = torch_client.validate_against_torch(captured, response["program"])
            if response["torch_validation"]["status"] == "failed":
                raise OptimizeError(f"the optimized program disagrees with PyTorch: "
                                    f"{response['torch_validation']['reason']}", detail=response["torch_validation"])
        with stage(stages, "build"):
            result = OptimizeResult(response=response, fn=torch_client.TorchFunction(response["program"], captured),
                                    original=program)
    else:
        with stage(stages, "build"):
            result = _result(response, in_tree, out_tree, program)
    result.report["timings_s"].update(stages)  # so that the stages add up to the call's wall time
    return result


def _timed_request(stages: dict[str, float], send: Callable[[], ResponseJSON]) -> ClientResponseJSON:
    """`send()`'s response; `stages["client"]` gets the request's time outside the optimizer's own
    stages (serialization, transport, a job's queueing, first imports; a cached response's stages
    are those of the request that computed it)."""
    start = time.perf_counter()
    response = send()
    optimizer = sum((response.get("report") or {}).get("timings_s", {}).values())
    stages["client"] = round(max(0.0, time.perf_counter() - start - optimizer), 6)
    return response


class OptimizedFunction:
    """What `jit` returns: one optimization per input signature, cached on the wrapper."""

    def __init__(self, fn: Callable[..., Any], *, server: str | None, hardware: str | dict | None,
                 static_argnums: Sequence[int], static_argnames: Sequence[str],
                 weight_argnums: Sequence[int], on_error: str, options: OptionsJSON):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, not {on_error!r}")
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._server, self._hardware, self._options = server, hardware, options
        self._static_argnums = tuple(static_argnums)
        self._static_argnames = tuple(static_argnames)
        self._weight_argnums = tuple(weight_argnums)
        self._on_error = on_error
        # signature -> (optimized callable, its result), or (None, None) after a fallback
        self._cache: dict[Hashable, tuple[Callable[..., Any] | None, OptimizeResult | None]] = {}
        self._lock = threading.Lock()
        self.last_result: OptimizeResult | None = None

    @functools.cached_property
    def _fallback(self) -> Callable[..., Any]:
        return jax.jit(self._fn, static_argnums=self._static_argnums,
                       static_argnames=self._static_argnames)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        static_pos = {i % len(args) for i in self._static_argnums if -len(args) <= i < len(args)}
        statics = tuple((i, args[i]) for i in sorted(static_pos)) \
            + tuple((k, kwargs[k]) for k in sorted(kwargs) if k in self._static_argnames)
        dyn_args = tuple(a for i, a in enumerate(args) if i not in static_pos)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
        leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        # avals, as jax.jit keys and hashed fast; a JAX array carries its own (jax.typeof builds one: 9 us a call)
        key = (tree, tuple(x.aval if isinstance(x, jax.Array) else jax.typeof(x) for x in leaves), statics)
        try:
            hash(key)
        except TypeError as exc:
            raise ValueError(f"static arguments must be hashable, as for jax.jit: {exc}") from None
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._compile(args, kwargs, static_pos, dyn_args, dyn_kwargs)
            compiled, self.last_result = self._cache[key]
        if self.last_result is None:
            return self._fallback(*args, **kwargs)
        return compiled(dyn_args, dyn_kwargs)

    def _compile(self, args: tuple, kwargs: dict, static_pos: set[int], dyn_args: tuple,
                 dyn_kwargs: dict) -> tuple[Callable[..., Any] | None, OptimizeResult | None]:
        def traced(d_args: tuple, d_kwargs: dict) -> Any:
            it = iter(d_args)
            full = [args[i] if i in static_pos else next(it) for i in range(len(args))]
            return self._fn(*full, **{**kwargs, **d_kwargs})

        # weight_argnums count positions of the original call; the captured args are (dyn, kw).
        dyn_positions = [i for i in range(len(args)) if i not in static_pos]
        weights = {dyn_positions.index(i % len(args)) for i in self._weight_argnums
                   if -len(args) <= i < len(args) and i % len(args) in dyn_positions}
        try:
            result = _optimize_split(traced, dyn_args, dyn_kwargs, weights, self._server,
                                     self._hardware, self._options)
            status = result.validation.get("status")
            if status == "failed" or (status == "inconclusive" and self._on_error != "accept"):
                raise OptimizeError(f"the optimized program's validation is {status}: "
                                    f"{result.validation.get('reason')}", detail=result.validation)
            if status == "inconclusive":
                warnings.warn(f"optu: using {getattr(self._fn, '__name__', self._fn)!r} optimized although its "
                              f"validation is inconclusive: {result.validation.get('reason')}", RuntimeWarning,
                              stacklevel=3)
        except Exception as exc:  # "fallback" means the optimizer can never break the user's code
            if self._on_error == "raise":
                raise
            warnings.warn(f"optu: optimizing {getattr(self._fn, '__name__', self._fn)!r} failed, "
                          f"running plain jax.jit instead: {exc}", RuntimeWarning, stacklevel=3)
            return None, None
        return result.fn, result


def _optimize_split(traced: Callable[..., Any], dyn_args: tuple, dyn_kwargs: dict,
                    weights: set[int], server: str | None, hardware: str | dict | None,
                    options: OptionsJSON) -> OptimizeResult:
    """`optimize` of traced(dyn_args, dyn_kwargs), marking the leaves of weight args as weights.

    Weights are nested one level down (inside dyn_args), so roles are set on the captured program
    rather than through capture's top-level weight_argnums."""
    program, in_tree, out_tree = capture_with_trees(traced, dyn_args, dyn_kwargs)
    sizes = [len(jax.tree_util.tree_leaves(a)) for a in dyn_args]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for i in weights:
        for spec in program["inputs"][starts[i]:starts[i] + sizes[i]]:
            spec["role"] = "weight"
    response = optimize_program(program, server=server, hardware=hardware, options=options)
    return _result(response, in_tree, out_tree, program)


def jit(fn: Callable[..., Any] | None = None, *, server: str | None = None,
        hardware: str | dict | None = DEFAULT_HARDWARE, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), weight_argnums: int | Sequence[int] = (),
        on_error: str = "fallback", **options: Any) -> Any:
    """Like `jax.jit`, but each new input signature is captured, optimized and validated first.

    Usable as `jit(f)`, `@jit` or `@jit(server=..., static_argnums=...)`; `options` are
    OptimizeOptions fields. `.last_result` holds the OptimizeResult of the last call's signature
    (None when that signature fell back to plain jax.jit)."""
    def as_tuple(v: Any) -> tuple:
        return (v,) if isinstance(v, (int, str)) else tuple(v)

    def wrap(f: Callable[..., Any]) -> OptimizedFunction:
        return OptimizedFunction(f, server=server, hardware=hardware,
                                 static_argnums=as_tuple(static_argnums),
                                 static_argnames=as_tuple(static_argnames),
                                 weight_argnums=as_tuple(weight_argnums), on_error=on_error,
                                 options=options)

    return wrap if fn is None else wrap(fn)
