"""A real server on a loopback port under bad input and concurrent load: every bad request is a 4xx
naming the problem, the server keeps answering, and 16 concurrent clients see zero errors."""
from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from wire_examples import MATMUL_SCALE as TINY
from wire_examples import VALIDATED

from bench.models.zoo import WEIGHT_ARGNUMS, ZOO
from service.http.devserver import running_server
from wire.capture import capture

pytestmark = pytest.mark.integration  # a real server or subprocess

SCAN_LEAF = {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}],
             "consts": [], "outputs": ["y"],
             "eqns": [{"op": "mul", "in": ["x", {"lit": 2.0, "dtype": "float32"}],
                       "out": [{"name": "y", "shape": [4], "dtype": "float32"}], "params": {}}]}


def tiny(edit=None) -> dict:
    program = copy.deepcopy(TINY)
    if edit:
        edit(program)
    return program


def nested_scan(depth: int) -> dict:
    """`depth` scans each holding the next as its body (length 1, so running it stays cheap)."""
    program = SCAN_LEAF
    for _ in range(depth):
        program = {"format": "optu.jaxpr/v1", "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}],
                   "consts": [], "outputs": ["y"],
                   "eqns": [{"op": "scan", "in": ["x"], "out": [{"name": "y", "shape": [4], "dtype": "float32"}],
                             "params": {"reverse": False, "length": 1, "jaxpr": {"program": program},
                                        "num_consts": 0, "num_carry": 1, "unroll": 1}}]}
    return program


def body(program: dict, **extra) -> bytes:
    # allow_nan: Python writes the bare tokens NaN/Infinity, which some clients do send.
    return json.dumps({"program": program, **extra}, allow_nan=True).encode()


def _set(path, value):
    def edit(program):
        node = program
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _huge_matmul(program):
    program["inputs"][0]["shape"] = [10**9, 10**9]
    program["inputs"][1]["shape"] = [10**9, 10**9]
    program["eqns"][0]["out"][0]["shape"] = [10**9, 10**9]


# (id, raw body, status, strings the answer must contain, {detail key: value} for a 422 WireError)
CORPUS = [
    ("malformed-json", b'{"program": {"format": "optu.jaxpr/v1", "inputs": [', 400, ["malformed JSON"], {}),
    ("truncated-literal", b'{"program": tru', 400, ["malformed JSON"], {}),
    ("not-utf8", b"\xff\xfe{}", 400, ["malformed JSON"], {}),
    ("wrong-format-version", body(tiny(_set(["format"], "optu.jaxpr/v2"))), 400,
     ["optu.jaxpr/v2", "optu.jaxpr/v1"], {}),
    ("undefined-variable", body(tiny(_set(["eqns", 1, "in", 1], "nope"))), 422, ["nope"],
     {"eqn": 1, "field": "in[1]"}),
    ("shape-mismatch", body(tiny(_set(["eqns", 0, "out", 0, "shape"], [4, 15]))), 422, ["[4, 15]"],
     {"eqn": 0, "field": "out[0]"}),
    ("cycle-use-before-definition", body(tiny(_set(["eqns", 0, "in", 0], "e"))), 422, ["'e'"], {"eqn": 0}),
    ("huge-shapes", body(tiny(_huge_matmul)), 422, ["OPTU_MAX_TENSOR_ELEMENTS"], {"field": "inputs[0]"}),
    ("huge-dimension-overflows-int64", body(tiny(_set(["inputs", 0, "shape"], [10**30, 8]))), 422,
     ["inputs", "shape"], {}),
    ("negative-dimension", body(tiny(_set(["inputs", 0, "shape"], [-4, 8]))), 422,
     ["inputs", "shape", "greater than or equal to 0"], {}),
    ("unknown-dtype", body(tiny(_set(["inputs", 0, "dtype"], "float33"))), 422, ["float33"], {}),
    ("object-dtype", body(tiny(_set(["inputs", 1, "dtype"], "object"))), 422, ["object"], {}),
    ("nan-literal-bare-token", body(tiny(_set(["eqns", 1, "in", 0], {"lit": float("nan"), "dtype": "float32"}))),
     422, ["nan"], {}),
    ("inf-literal-bare-token", body(tiny(_set(["eqns", 1, "in", 0], {"lit": float("inf"), "dtype": "float32"}))),
     422, ["inf"], {}),
    ("inf-param-bare-token", body(tiny(_set(["eqns", 1, "params"], {"scale": float("-inf")}))), 422,
     ["params", "inf"], {}),
    ("nan-in-shape", body(tiny(_set(["inputs", 0, "shape"], [float("nan"), 8]))), 422, ["shape"], {}),
    # Python's json gives up on deep nesting (RecursionError); that must read as a 400 about depth.
    ("deeply-nested-json", b'{"program": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}", 400,
     ["nest"], {}),
    ("deeply-nested-json-array", b'{"program": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400,
     ["nest"], {}),
]


def _nested_with_ghost() -> bytes:
    program = nested_scan(3)
    _set(["eqns", 0, "params", "jaxpr", "program", "eqns", 0, "params", "jaxpr", "program", "eqns", 0,
          "params", "jaxpr", "program", "eqns", 0, "in", 0], "ghost")(program)
    return body(program)


CORPUS.append(("nested-body-undefined-variable", _nested_with_ghost(), 422, ["ghost"], {"eqn": 0}))


def post(url: str, content: bytes, timeout: float = 60) -> httpx.Response:
    return httpx.post(url + "/v1/optimize", content=content, timeout=timeout,
                      headers={"content-type": "application/json"})


def assert_alive(url: str) -> None:
    r = httpx.get(url + "/healthz", timeout=5)
    assert r.status_code == 200, "the server stopped answering /healthz"


@pytest.mark.parametrize("name, content, status, mentions, located",
                         [pytest.param(*case, id=case[0]) for case in CORPUS])
def test_bad_input_is_the_right_4xx_naming_the_problem(server_url, name, content, status, mentions, located):
    r = post(server_url, content)
    assert r.status_code == status, f"{name}: {r.status_code} {r.text[:500]}"
    detail = r.json()["detail"]
    text = json.dumps(detail).lower()
    for word in mentions:
        assert word.lower() in text, f"{name}: answer does not mention {word!r}: {text[:500]}"
    for key, value in located.items():
        assert isinstance(detail, dict) and detail.get(key) == value, f"{name}: {key} should be {value}: {detail}"
    assert_alive(server_url)


def test_fifty_nested_scan_bodies_answer_without_5xx(server_url):
    # A valid program, just deep: it must be optimized (or refused by a named limit), never a 5xx.
    r = post(server_url, body(nested_scan(50), options={"time_limit_s": 5}), timeout=120)
    assert r.status_code in (200, 422), r.text[:500]
    if r.status_code == 200:
        assert r.json()["validation"]["status"] in ("passed", "skipped")
    else:
        assert "nest" in r.text.lower() or "depth" in r.text.lower(), r.text[:500]
    assert_alive(server_url)


@pytest.fixture(scope="module")
def small_body_server():
    """A second server whose OPTU_MAX_BODY_BYTES is 2 KiB."""
    with running_server({"OPTU_MAX_BODY_BYTES": "2048", "OPTU_WORKERS": "1"}, quiet=True) as (url, _):
        yield url


def test_oversized_body_is_413_naming_the_limit(small_body_server):
    big = tiny(_set(["consts"], [{"name": "pad", "shape": [4096], "dtype": "uint8", "data": "A" * 5464}]))
    r = post(small_body_server, body(big))
    assert r.status_code == 413 and "OPTU_MAX_BODY_BYTES" in r.json()["detail"] and "2048" in r.json()["detail"]

    def chunks():  # no Content-Length: the bytes actually received are counted
        yield b'{"program": {"format": "optu.jaxpr/v1", "inputs": [], "eqns": [], "outputs": [], "pad": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}}'

    r = httpx.post(small_body_server + "/v1/optimize", content=chunks(), timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert post(small_body_server, body(tiny())).status_code == 200, "a body under the limit still passes"


# --- concurrency ---------------------------------------------------------------------------------

CONCURRENT_MODELS = ("mlp2", "matmul_chain", "convnet", "rnn_unrolled")


@pytest.fixture(scope="module")
def zoo_programs():
    out = {}
    for name in CONCURRENT_MODELS:
        fn, args = ZOO[name]()
        out[name] = capture(fn, *args, weight_argnums=WEIGHT_ARGNUMS[name])
    return out


def test_sixteen_clients_two_hundred_requests_zero_errors_all_validated(server_url, zoo_programs):
    # Each model under two fp modes: a mix of cold (uncached) and repeated (cached) requests.
    bodies = [(name, body(program, options={"fp_mode": mode, "time_limit_s": 10}))
              for name, program in zoo_programs.items() for mode in ("exact", "real")]
    jobs = [bodies[i % len(bodies)] for i in range(200)]

    with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=16)) as client:
        def send(job):
            name, content = job
            try:
                r = client.post(server_url + "/v1/optimize", content=content,
                                headers={"content-type": "application/json"})
            except httpx.HTTPError as exc:
                return name, None, f"{type(exc).__name__}: {exc}"
            return name, r.status_code, r.text

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(send, jobs))

    errors = [(name, status, text[:300]) for name, status, text in results if status != 200]
    assert not errors, f"{len(errors)} of 200 failed, first: {errors[:3]}"
    for name, _, text in results:
        answer = json.loads(text)
        assert answer["validation"]["status"] in VALIDATED, (name, answer["validation"])
        assert answer["program"]["format"] == "optu.jaxpr/v1" and answer["cache"] in ("hit", "miss")
    ids = {}
    for (name, content), (_, _, text) in zip(jobs, results):  # the same request always gets the same id
        ids.setdefault(content, set()).add(json.loads(text)["id"])
    assert all(len(v) == 1 for v in ids.values())
    assert_alive(server_url)


def test_an_empty_program_is_answered_without_a_server_error(server_url):
    empty = {"format": "optu.jaxpr/v1", "inputs": [], "eqns": [], "outputs": []}
    r = post(server_url, body(empty))
    assert r.status_code in (200, 422), r.text[:500]
    assert_alive(server_url)
