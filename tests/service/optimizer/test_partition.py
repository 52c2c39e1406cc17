"""Piecewise search: an encoder's repeated layers are searched once per kind of piece and stitched
back; the result is the one the whole-program search finds, and programs whose pieces could merge
across a cut are searched whole."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bench.models.large import bert_encoder
from costmodel.profile import load_profile, with_overrides
from lowering.kernels import build_kernel_program
from service.optimizer import partition
from service.optimizer.options import OptimizeOptions
from service.optimizer.partition import find_pieces, search_pieces
from service.optimizer.pipeline import optimize
from service.optimizer.search import search
from wire.capture import capture
from wire.execute import program_to_callable

pytestmark = pytest.mark.slow  # whole programs through the pipeline

PROFILE = load_profile("optu-v1")


@pytest.fixture(scope="module")
def encoder():
    fn, args, weights = bert_encoder(6, hidden=32, heads=4, seq=8, batch=2)
    return capture(fn, *args, weight_argnums=weights), args


def test_an_encoder_is_cut_into_repeated_pieces_that_each_end_a_kernel(encoder):
    program, _ = encoder
    pieces = find_pieces(program)
    assert pieces is not None and len(pieces) >= 6
    assert len({p.signature for p in pieces}) <= 3  # one or two kinds per layer, plus the first
    assert [p.start for p in pieces[1:]] == [p.stop for p in pieces[:-1]]
    assert pieces[0].start == 0 and pieces[-1].stop == len(program["eqns"])
    inputs = {s["name"] for s in program["inputs"]}
    for piece in pieces[1:]:  # each value carried across a cut is read by GEMMs or joins a later kernel
        eqns = program["eqns"][piece.start:piece.stop]
        made_here = {o["name"] for e in eqns for o in e["out"]}
        carried = [n for n in piece.inputs if n not in inputs]
        assert len(carried) == 1  # where one live value makes pieces repeat, no cut carries more
        for value in carried:
            for e in (e for e in eqns if value in e["in"]):
                assert e["op"] in ("dot_general", "reshape", "transpose") or made_here & set(e["in"]), e["op"]


def test_the_stitched_search_is_the_whole_programs_and_computes_the_same(encoder):
    # Cuts are where conventional fusion ends a kernel anyway, so with one GEMM per kernel the pieces
    # lose nothing. (Where kernels run GEMMs back to back, each cut costs a chained kernel's split.)
    program, args = encoder
    profile = with_overrides(PROFILE, {"kernel.max_gemms": 1})
    options, timings = OptimizeOptions(), {}
    pieces = find_pieces(program)
    stitched = search_pieces(program, pieces, lambda piece: search(piece, profile, options, timings))
    whole = search(program, profile, options, timings)
    assert stitched.pieces["searched"] < stitched.pieces["pieces"]
    estimate = lambda s: build_kernel_program(s.candidate, profile, groups=s.groups).total.time_s
    # nothing is lost at a cut; a piece's small e-graph may even be extracted exactly where the
    # whole program's is left to greedy
    assert estimate(stitched) <= estimate(whole) * (1 + 1e-9)
    x = jax.tree.leaves(args)
    for want, got in zip(program_to_callable(program)(*x), program_to_callable(stitched.candidate)(*x)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_an_encoder_called_without_weight_roles_is_cut_alike_and_stitched_to_the_whole_programs_estimate():
    """Weights passed as ordinary arguments are each read at one place: they never span a cut, so
    the layers repeat as they do with their roles marked (a residual input still spans its layer)."""
    fn, args, _ = bert_encoder(6, hidden=32, heads=4, seq=8, batch=2)
    program = capture(fn, *args)
    assert not any(s.get("role") == "weight" for s in program["inputs"])
    pieces = find_pieces(program)
    assert pieces is not None and len(pieces) >= 6 and len({p.signature for p in pieces}) <= 3
    profile = with_overrides(PROFILE, {"kernel.max_gemms": 1})  # cuts then lose nothing (see above)
    options, timings = OptimizeOptions(), {}
    stitched = search_pieces(program, pieces, lambda piece: search(piece, profile, options, timings))
    whole = search(program, profile, options, timings)
    estimate = lambda s: build_kernel_program(s.candidate, profile, groups=s.groups).total.time_s
    assert estimate(stitched) <= estimate(whole) * (1 + 1e-9)  # nothing lost at a cut (see above)


def test_the_stitched_floor_adds_each_piece_s_floor_once_per_place_it_runs(encoder):
    program, _ = encoder
    options, timings, by_signature = OptimizeOptions(), {}, {}
    pieces = find_pieces(program)
    for piece in pieces:
        if piece.signature not in by_signature:
            by_signature[piece.signature] = search(piece.program, PROFILE, options, timings)
    stitched = search_pieces(program, pieces, lambda piece: search(piece, PROFILE, options, timings))
    floors = [by_signature[p.signature].floor for p in pieces]
    assert len(floors) > len(by_signature)  # a piece that repeats
    summed = stitched.floor.times
    for resource in ("compute_s", "memory_s", "launch_s"):
        assert getattr(summed, resource) == pytest.approx(sum(getattr(f.times, resource) for f in floors))
    assert summed.launch_s >= len(pieces) * PROFILE.kernel.launch_overhead_s  # a kernel per piece at least
    assert stitched.floor.exact == frozenset.intersection(*(f.exact for f in floors))
    stitched_estimate = build_kernel_program(stitched.candidate, PROFILE, groups=stitched.groups).total
    assert max(summed.compute_s, summed.memory_s) + summed.launch_s <= stitched_estimate.time_s


def test_the_pipeline_reports_the_pieces_and_validates_the_stitched_program(encoder):
    program, _ = encoder
    response = optimize(program)
    assert response["report"]["partition"]["searched"] < response["report"]["partition"]["pieces"]
    # each distinct piece checked against the piece it replaces: merged projections, a mean's
    # division by a power of two as a multiplication, which value numbering sees as the same
    assert response["validation"]["status"] == "identical" and response["validation"]["criterion"] == "identical"
    # the pieces' kernels end at the cuts; the stitched program is grouped over them where cheaper
    assert response["report"]["fusion"]["chosen"] != "baseline"
    assert response["estimate"]["speedup_vs_baseline"] > 1.0
    assert response["estimate"]["lower_bound"]["over"] == "egraph"  # the pieces' e-graphs' floors, added


def test_pieces_sharing_a_weight_are_searched_whole(monkeypatch):
    # an unrolled RNN: every step multiplies by the same weights, which a merge across steps uses;
    # with a weight per step the same program is cut
    monkeypatch.setattr(partition, "MIN_PROGRAM_EQNS", 10)
    monkeypatch.setattr(partition, "MIN_PIECE_EQNS", 2)
    rng = np.random.default_rng(0)
    steps = 8
    xs = [rng.normal(size=(4, 16)).astype(np.float32) for _ in range(steps)]
    ws = [rng.normal(size=(16, 16)).astype(np.float32) for _ in range(2 * steps)]

    def rnn(xs, ws):
        h = jnp.zeros((4, 16), jnp.float32)
        for t, x in enumerate(xs):
            h = jnp.tanh(x @ ws[2 * t] + h @ ws[2 * t + 1])
        return h

    def shared_rnn(xs, w, u):
        return rnn(xs, [w, u] * steps)

    def shared_transposed(xs, w, u):  # each step reaches the shared weight through its own transpose
        h = jnp.zeros((4, 16), jnp.float32)
        for x in xs:
            h = jnp.tanh(x @ w.T + h @ u.T)
        return h

    assert find_pieces(capture(shared_rnn, xs, ws[0], ws[1], weight_argnums=(0, 1, 2))) is None
    assert find_pieces(capture(shared_transposed, xs, ws[0], ws[1], weight_argnums=(0, 1, 2))) is None
    assert find_pieces(capture(rnn, xs, ws, weight_argnums=(0, 1))) is not None


def test_a_program_with_nothing_repeated_is_searched_whole(monkeypatch):
    monkeypatch.setattr(partition, "MIN_PROGRAM_EQNS", 10)
    monkeypatch.setattr(partition, "MIN_PIECE_EQNS", 2)
    rng = np.random.default_rng(0)
    shapes = [(8, 8 + 4 * k) for k in range(8)]
    ws = [rng.normal(size=(a, b)).astype(np.float32) for (_, a), (_, b) in zip(shapes, shapes[1:])]

    def chain(x, *ws):
        for w in ws:
            x = jnp.tanh(x @ w)
        return x

    x = rng.normal(size=(4, 8)).astype(np.float32)
    assert find_pieces(capture(chain, x, *ws, weight_argnums=tuple(range(1, 8)))) is None


def test_a_piece_that_simplifies_to_its_input_is_stitched_as_an_alias(monkeypatch):
    # reshape pairs cancel: those pieces return their input, which later pieces then read
    monkeypatch.setattr(partition, "MIN_PROGRAM_EQNS", 10)
    monkeypatch.setattr(partition, "MIN_PIECE_EQNS", 2)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 16)).astype(np.float32)
    ws = [rng.normal(size=(16, 16)).astype(np.float32) / 4 for _ in range(6)]

    def net(x, ws):
        for w in ws:
            x = jnp.tanh(x.reshape(4, 4, 4).reshape(4, 16) @ w)
        return x

    program = capture(net, x, ws, weight_argnums=(1,))
    pieces = find_pieces(program)
    assert pieces is not None and any(len(p.program["eqns"]) == 2 and
                                      {e["op"] for e in p.program["eqns"]} == {"reshape"} for p in pieces)
    response = optimize(program)
    assert response["report"]["partition"]["searched"] == len({p.signature for p in pieces}) == 3  # the first, then two
    assert "reshape" not in [e["op"] for e in response["program"]["eqns"]]
    assert response["validation"]["status"] == "identical"  # a reshape pair is nothing to value numbering
    (got,) = program_to_callable(response["program"])(x, *ws)
    np.testing.assert_allclose(np.asarray(got), np.asarray(net(x, ws)), rtol=1e-5, atol=1e-6)


def test_a_cut_whose_reader_also_reads_a_broadcast_literal_is_weighed_not_a_crash():
    """Each layer's tanh is read by a product with a broadcast literal (jnp.full's form): the
    literal is not a value computed after the cut (it was looked up as a name: a TypeError)."""
    def layers(x):
        for _ in range(12):
            x = jnp.tanh(x) * jax.lax.broadcast_in_dim(0.5, x.shape, ())
            for _ in range(10):
                x = x * 1.01 + 0.1
        return x
    program = capture(layers, np.ones((4, 16), np.float32))
    assert len(program["eqns"]) >= partition.MIN_PROGRAM_EQNS
    assert find_pieces(program) is None  # the product would join the tanh's kernel: no cut there
    assert optimize(program)["validation"]["status"] in ("passed", "identical")


def _pre_ln_decoder(layers: int, hidden: int = 32, heads: int = 4, seq: int = 8, batch: int = 2,
                    position_bias: bool = False):
    """A GPT-style decoder as people write it in plain JAX: each layer normalizes the residual
    stream before its attention and its MLP, and the causal mask is built from iotas. With
    `position_bias`, T5's: a table of per-head biases by relative position (a weight), gathered
    once and masked by each layer."""
    rng = np.random.default_rng(0)
    w = lambda *shape: (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
    params = [{"qkv": w(hidden, 3 * hidden), "out": w(hidden, hidden), "up": w(hidden, 4 * hidden),
               "down": w(4 * hidden, hidden), "g1": np.ones(hidden, np.float32), "g2": np.ones(hidden, np.float32)}
              for _ in range(layers)]

    def norm(x, g):
        mean = x.mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g

    def decoder(x, params, table=None):
        causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
        split = lambda t: t.reshape(batch, seq, heads, hidden // heads).transpose(0, 2, 1, 3)
        relative = jnp.arange(seq)[None, :] - jnp.arange(seq)[:, None] + seq - 1
        bias = 0.0 if table is None else table[relative].transpose(2, 0, 1)  # heads x seq x seq
        for p in params:
            q, k, v = jnp.split(norm(x, p["g1"]) @ p["qkv"], 3, axis=-1)
            scores = split(q) @ split(k).transpose(0, 1, 3, 2) + jnp.where(causal, bias, -1e9)
            scores = jnp.where(causal, scores, -jnp.inf)
            attended = (jax.nn.softmax(scores, axis=-1) @ split(v)).transpose(0, 2, 1, 3)
            x = x + attended.reshape(batch, seq, hidden) @ p["out"]
            x = x + jax.nn.gelu(norm(x, p["g2"]) @ p["up"]) @ p["down"]
        return x

    x = rng.normal(size=(batch, seq, hidden)).astype(np.float32)
    return decoder, (x, params, w(2 * seq - 1, heads)) if position_bias else (x, params)


def test_a_pre_norm_decoder_is_cut_after_each_normalization_and_stitched_to_the_whole_programs_estimate():
    """The residual stream feeds the next normalization, which greedy fusion puts in the stream's
    kernel: a cut goes after the normalization, with both live across it. The causal mask depends on
    no input: each piece computes it, so it is never live across a cut."""
    fn, args = _pre_ln_decoder(6)
    program = capture(fn, *args, weight_argnums=(1,))
    pieces = find_pieces(program)
    assert pieces is not None and len(pieces) > 6 and len({p.signature for p in pieces}) < len(pieces) / 2
    inputs = {s["name"] for s in program["inputs"]}
    produced_at = {o["name"]: i for i, e in enumerate(program["eqns"]) for o in e["out"]}
    widest = 0
    for piece in pieces[1:]:
        carried = [n for n in piece.inputs if n not in inputs]
        assert 1 <= len(carried) <= partition.MAX_LIVE
        widest = max(widest, len(carried))
        for name in carried:  # no value crosses a cut into a reduction that reads it alone
            assert program["eqns"][produced_at[name]]["op"] not in ("iota", "ge")
        assert not any(e["op"].startswith("reduce") and set(e["in"]) <= set(carried)
                       for e in program["eqns"][piece.start:piece.stop])
    assert widest >= 2  # the stream and its normalized copy
    profile = with_overrides(PROFILE, {"kernel.max_gemms": 1})
    options, timings = OptimizeOptions(), {}
    stitched = search_pieces(program, pieces, lambda piece: search(piece, profile, options, timings))
    whole = search(program, profile, options, timings)
    assert stitched.pieces["searched"] < stitched.pieces["pieces"] / 2
    estimate = lambda s: build_kernel_program(s.candidate, profile, groups=s.groups).total.time_s
    assert estimate(stitched) == pytest.approx(estimate(whole), rel=1e-6)
    x = jax.tree.leaves(args)
    (want,), (got,) = program_to_callable(program)(*x), program_to_callable(stitched.candidate)(*x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_values_made_from_literals_alone_are_constant_unless_the_program_returns_them():
    def f(x):
        mask = jnp.arange(4)[:, None] >= jnp.arange(4)[None, :]
        scale = jnp.full((4, 4), 2.0)
        return jnp.where(mask, x * scale, 0.0), scale
    program = capture(f, np.ones((4, 4), np.float32))
    constant = partition.constant_values(program)
    ops = {o["name"]: e["op"] for e in program["eqns"] for o in e["out"]}
    assert {ops[n] for n in constant} >= {"iota", "ge"}
    assert not any(ops[n] in ("mul", "select_n") for n in constant)  # they read the input
    assert not constant & set(program["outputs"])  # the returned scale is computed where it is


def test_repeated_pieces_are_validated_apart_and_mostly_distinct_ones_as_the_whole_program():
    """Each check compiles its programs: three layers cut into mostly one-of-a-kind pieces are
    cheaper to check whole (its inputs drawn beside the search), six alike ones a piece at a time."""
    three, six = (capture(fn, *args, weight_argnums=(1,)) for fn, args in map(_pre_ln_decoder, (3, 6)))
    assert not partition.checked_apart(find_pieces(three)) and partition.checked_apart(find_pieces(six))
    whole, apart = optimize(three), optimize(six)
    assert whole["report"]["partition"]["searched"] < whole["report"]["partition"]["pieces"]
    assert whole["validation"]["status"] == "passed" and whole["validation"]["criterion"] != "pieces"
    assert apart["validation"]["status"] == "passed" and apart["validation"]["criterion"] == "pieces"


def test_no_cut_falls_between_a_normalization_of_the_input_and_the_gemm_whose_kernel_may_open_with_it(monkeypatch):
    """Later layers normalize what a GEMM's kernel wrote, so their next GEMM starts a kernel; the
    first normalizes the program's input, which that GEMM's kernel may take as a prologue."""
    monkeypatch.setattr(partition, "MIN_PIECE_EQNS", 5)  # a cut right after the first normalization is long enough
    fn, args = _pre_ln_decoder(6)
    program = capture(fn, *args, weight_argnums=(1,))
    pieces = find_pieces(program)
    ops = [e["op"] for e in program["eqns"]]
    first_norm, first_gemm = ops.index("reduce_sum"), ops.index("dot_general")
    assert pieces is not None and not any(first_norm < p.start <= first_gemm for p in pieces)
    later_gemms = [i for i, op in enumerate(ops) if op == "dot_general" and i > first_gemm]
    assert any(p.start in later_gemms for p in pieces)  # later layers' normalizations are cut after


def test_a_bias_made_from_weights_that_every_layer_masks_is_read_as_a_weight_where_weights_are_precomputed():
    """T5's relative position bias: gathered from a weight once, masked by every layer (work that
    reads no per-call value). Where the profile precomputes weight-only work it is computed once
    per weight set, so it is never live across a cut and each piece reads it as a weight; where the
    profile computes it per call, carrying it would split its kernel, and the program is searched
    whole."""
    fn, args = _pre_ln_decoder(6, position_bias=True)
    program = capture(fn, *args, weight_argnums=(1, 2))
    assert find_pieces(program, precompute_weights=False) is None
    pieces = find_pieces(program, precompute_weights=True)
    assert pieces is not None and len(pieces) > 6 and len({p.signature for p in pieces}) < len(pieces) / 2
    inputs = {s["name"] for s in program["inputs"]}
    derived = [{s["name"] for s in piece.program["inputs"] if s["name"] not in inputs and s.get("role") == "weight"}
               for piece in pieces[1:]]
    assert sum(map(bool, derived)) >= 5  # every layer after the first (whose piece gathers it)
    response = optimize(program)
    assert response["report"]["partition"]["searched"] < response["report"]["partition"]["pieces"]
    assert response["validation"]["status"] in ("passed", "identical")
    assert response["estimate"]["optimized"]["time_s"] <= response["estimate"]["baseline"]["time_s"]


def test_an_encoder_decoder_s_decoder_is_cut_though_the_encoder_s_output_is_live_throughout_it():
    """Post-norm encoder layers are cut carrying one value (their output); the decoder's layers
    each read the encoder's output as well, so no cut there carries one value alone, and its
    stretch, far longer than a typical piece, is cut carrying more."""
    rng = np.random.default_rng(0)
    hidden, seq, batch = 32, 8, 2
    w = lambda *shape: (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32)
    encoder_layers = [{"up": w(hidden, 4 * hidden), "down": w(4 * hidden, hidden), "g": np.ones(hidden, np.float32)}
                      for _ in range(4)]
    decoder_layers = [{"q": w(hidden, hidden), "k": w(hidden, hidden), "v": w(hidden, hidden), "o": w(hidden, hidden),
                       "up": w(hidden, 4 * hidden), "down": w(4 * hidden, hidden),
                       "g1": np.ones(hidden, np.float32), "g2": np.ones(hidden, np.float32)} for _ in range(4)]

    def norm(x, g):
        mean = x.mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g

    def encoder_decoder(source, target, encoder_layers, decoder_layers):
        for p in encoder_layers:
            source = norm(source + jax.nn.gelu(source @ p["up"]) @ p["down"], p["g"])
        for p in decoder_layers:
            scores = norm(target, p["g1"]) @ p["q"] @ (source @ p["k"]).transpose(0, 2, 1)
            target = target + jax.nn.softmax(scores, axis=-1) @ (source @ p["v"]) @ p["o"]
            target = target + jax.nn.gelu(norm(target, p["g2"]) @ p["up"]) @ p["down"]
        return target

    x = lambda: rng.normal(size=(batch, seq, hidden)).astype(np.float32)
    program = capture(encoder_decoder, x(), x(), encoder_layers, decoder_layers, weight_argnums=(2, 3))
    pieces = find_pieces(program)
    assert pieces is not None
    source_name = program["inputs"][0]["name"]
    decoder_start = next(i for i, e in enumerate(program["eqns"]) if program["inputs"][1]["name"] in e["in"])
    inputs = {s["name"] for s in program["inputs"]}
    encoder = [p for p in pieces[1:] if p.stop <= decoder_start]
    decoder = [p for p in pieces if p.start >= decoder_start]
    assert encoder and all(len([n for n in p.inputs if n not in inputs]) == 1 for p in encoder)
    assert len(decoder) >= 4 and any(len([n for n in p.inputs if n not in inputs]) >= 2 for p in decoder)
    assert source_name not in {n for p in decoder for n in p.inputs}  # the encoder's output, not its input
    response = optimize(program)
    assert response["validation"]["status"] in ("passed", "identical")
    assert response["estimate"]["optimized"]["time_s"] <= response["estimate"]["baseline"]["time_s"]
