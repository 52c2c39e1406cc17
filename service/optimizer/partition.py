"""Piecewise search of programs that repeat themselves (an encoder's or a decoder's layers): the
program is cut where a few values are live, each of which ends its kernel anyway (a pre-norm
decoder's residual stream is carried past its normalization, not cut before it), pieces of the
same structure are searched once, and the results are stitched back, renamed per piece. Values
made from literals alone (a causal mask) are recomputed by each piece that reads them.

Cutting loses only what a rewrite or a kernel could gain across a cut. Merges are the rewrites that
span far (two GEMMs sharing an operand), so a program is cut only when no program input is a GEMM
operand in two pieces (an RNN's shared weights, for one, keep it whole). Pieces of the same
structure read the same kinds of values in the same places, so one search serves them all.
"""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from costmodel.extract import Extraction
from costmodel.kernel_cost import VIEW_OPS, ResourceTimes
from costmodel.key_blocking import Step, attention_groups
from lowering.kernels import avals_of, static_names
from rewrites.schedule import SaturationReport
from service.optimizer.search import FLOOR_RESOURCES, EGraphFloor, Search
from validation.regions import region_signature
from wire.json_types import Eqn, Program
from wire.primitives import GEMMS

MIN_PROGRAM_EQNS = 200  # smaller programs search whole in well under a second
MIN_PIECE_EQNS = 20  # cuts closer than this are merged: tiny pieces lose fusion for nothing
MAX_LIVE = 6  # values live across a cut: the residual stream, its normalization, masks, position tables
LAYOUT_OPS = VIEW_OPS | {"transpose", "convert_element_type"}  # a GEMM operand seen through these is its source


@dataclass
class Piece:
    """Equations `start..stop` of the program; the names it reads from outside (earlier pieces,
    program inputs) and the consts it reads, each in order of first use; the names it produces
    that later pieces or the program outputs read, in order."""

    start: int
    stop: int
    inputs: list[str]
    consts: list[str]
    outputs: list[str]
    program: Program  # the piece as a wire program of its own
    signature: str


def find_pieces(program: Program, precompute_weights: bool = True) -> list[Piece] | None:
    """The pieces of `program`, or None when it should be searched whole (small, no repetition,
    or a GEMM operand shared across pieces). `precompute_weights`: the profile's
    `kernel.precompute_weights`, under which values made from weights are read as weights."""
    eqns = program["eqns"]
    if len(eqns) < MIN_PROGRAM_EQNS:
        return None
    constant = constant_values(program)
    # computed once per weight set (a position bias every layer reads): never live, a weight to the pieces
    per_weight_set = static_names(program, precompute_weights) - constant if precompute_weights else set()
    unlive = constant | per_weight_set
    pieces_at = lambda bounds: [_piece(program, start, stop, constant, per_weight_set)
                                for start, stop in zip([0, *bounds], [*bounds, len(eqns)])]
    # each cut may break a chain of GEMMs where kernels hold several: carry one value where that
    # repeats (a post-norm encoder's layer output), more only where it does not (a pre-norm decoder)
    bounds = _cuts(program, unlive, 1)
    pieces = pieces_at(bounds)
    if _repeats(pieces):
        # a stretch one carried value cannot cut (an encoder-decoder's decoder, where the encoder's
        # output is live throughout) is cut carrying more where it is far longer than a typical piece
        spans = list(zip([0, *bounds], [*bounds, len(eqns)]))
        long = 2 * statistics.median(stop - start for start, stop in spans)
        finer = [cut for cut in _cuts(program, unlive, MAX_LIVE)
                 if any(stop - start > long and start + MIN_PIECE_EQNS <= cut <= stop - MIN_PIECE_EQNS
                        for start, stop in spans)]
        if finer:
            bounds = sorted(bounds + finer)
            pieces = pieces_at(bounds)
    else:
        bounds = _cuts(program, unlive, MAX_LIVE)
        pieces = pieces_at(bounds)
        if not _repeats(pieces):
            return None  # nothing repeats: one search of the whole does as well
    gemm_inputs: dict[str, int] = {}
    inputs = {s["name"] for s in program["inputs"]}
    source = _layout_sources(eqns)
    for k, piece in enumerate(pieces):
        for e in eqns[piece.start:piece.stop]:
            for a in (e["in"] if e["op"] in GEMMS else ()):
                a = source.get(a, a) if isinstance(a, str) else a
                if isinstance(a, str) and a in inputs and gemm_inputs.setdefault(a, k) != k:
                    return None  # a merge across pieces could pay
    return pieces


def _repeats(pieces: list[Piece]) -> bool:
    return len(pieces) > 3 and len({p.signature for p in pieces}) < len(pieces)


def _layout_sources(eqns: list[Eqn]) -> dict[str, str]:
    """For a value made from one other by layout ops only (a transposed weight), that value."""
    source: dict[str, str] = {}
    for e in eqns:
        operands = [a for a in e["in"] if isinstance(a, str)]
        if e["op"] in LAYOUT_OPS and len(operands) == 1 and len(e["out"]) == 1:
            source[e["out"][0]["name"]] = source.get(operands[0], operands[0])
    return source


def _cuts(program: Program, unlive: set[str], max_live: int) -> list[int]:
    """Equation indices a piece may start at: at most `max_live` values live across (`unlive`
    values never are: each piece computes or reads them as it reads a weight), no later reader
    of one that greedy fusion would put in its producer's kernel, not inside an attention, pieces
    >= MIN_PIECE_EQNS."""
    eqns, outputs = program["eqns"], {o for o in program["outputs"] if isinstance(o, str)}
    last_use: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, e in enumerate(eqns):
        for a in e["in"]:
            if isinstance(a, str):
                last_use[a] = i
                readers.setdefault(a, []).append(i)
    produced_at = {o["name"]: i for i, e in enumerate(eqns) for o in e["out"]}
    # an activation is live from its first read to its last (a residual input: across its layer), as a
    # layer's output would be; an input read at one place (a weight, marked or not) never spans a cut
    activations = {s["name"] for s in program["inputs"] if s.get("role") != "weight"}
    precomputed = static_names(program)  # from weights and constants alone: no per-call kernel computes it
    # an attention's two products may share a (key-blocked) kernel whatever the profile: never cut between
    within_attention = {c for group in attention_groups([Step.of(e) for e in eqns], avals_of(program))
                        for c in range(min(group) + 1, max(group) + 1)}
    live: set[str] = set()
    cuts, previous = [], 0
    for i, e in enumerate(eqns):
        live |= {a for a in e["in"] if isinstance(a, str) and a in activations}
        live -= {a for a in e["in"] if isinstance(a, str) and last_use[a] == i}
        live |= {o["name"] for o in e["out"]
                 if o["name"] not in unlive and (o["name"] in outputs or last_use.get(o["name"], i) > i)}
        if len(live) <= max_live and i + 1 not in within_attention \
                and i + 1 - previous >= MIN_PIECE_EQNS and len(eqns) - (i + 1) >= MIN_PIECE_EQNS \
                and all(_ends_a_kernel(value, i + 1, eqns, readers, produced_at, precomputed) for value in live):
            cuts.append(previous := i + 1)
    return cuts


def _ends_a_kernel(value: str, cut: int, eqns: list[dict], readers: dict[str, list[int]],
                   produced_at: dict[str, int], precomputed: set[str]) -> bool:
    """Whether greedy fusion would end `value`'s kernel anyway: each later reader (seen through
    views) is a GEMM, which starts a kernel once `value`'s own kernel holds one, or also reads a
    value computed per call after the cut (not a view of an input; not a weight's gather, which is
    precomputed), whose kernel it would join."""
    def computed_after_cut(name: str) -> bool:
        while isinstance(name, str) and name in produced_at and eqns[produced_at[name]]["op"] in VIEW_OPS:
            name = eqns[produced_at[name]]["in"][0]
        return isinstance(name, str) and name not in precomputed and produced_at.get(name, -1) >= cut  # a literal: no

    stack = [r for r in readers.get(value, []) if r >= cut]  # earlier readers share the producer's piece
    while stack:
        e = eqns[stack.pop()]
        if e["op"] in VIEW_OPS:
            stack.extend(readers.get(e["out"][0]["name"], []))
        elif e["op"] in GEMMS:
            if not _computed_after_a_gemm(value, eqns, produced_at):
                return False  # the GEMM's kernel may take the work before it as a prologue
        elif not any(isinstance(a, str) and a != value and computed_after_cut(a) for a in e["in"]):
            return False
    return True


def _computed_after_a_gemm(value: str, eqns: list[dict], produced_at: dict[str, int]) -> bool:
    """Whether the work computing `value` reaches back to a GEMM (whose kernel it shares, so a later
    GEMM starts a kernel of its own) rather than only to the program's inputs (a first layer's
    normalization of its input, which a GEMM's kernel may open with)."""
    stack, seen = [value], set()
    while stack:
        name = stack.pop()
        if name in seen or name not in produced_at:
            continue
        seen.add(name)
        e = eqns[produced_at[name]]
        if e["op"] in GEMMS:
            return True
        stack.extend(a for a in e["in"] if isinstance(a, str))
    return False


def constant_values(program: Program) -> set[str]:
    """Values computed from literals and consts alone (a causal mask from iotas), program outputs
    aside. They are the same on every call and free per call under every profile, so they are
    never live across a cut: a piece that reads one computes it itself."""
    return static_names(program, weights=False) - {o for o in program["outputs"] if isinstance(o, str)}


def _definitions(eqns: list[Eqn], names: list[str]) -> list[Eqn]:
    """The equations that compute `names` from what they read, transitively, in program order."""
    producer = {o["name"]: i for i, e in enumerate(eqns) for o in e["out"]}
    needed: set[int] = set()
    stack = [n for n in names if n in producer]
    while stack:
        i = producer[stack.pop()]
        if i not in needed:
            needed.add(i)
            stack.extend(a for a in eqns[i]["in"] if isinstance(a, str) and a in producer)
    return [eqns[i] for i in sorted(needed)]


def _piece(program: Program, start: int, stop: int, constant: set[str], per_weight_set: set[str]) -> Piece:
    own = program["eqns"][start:stop]
    produced = {o["name"] for e in own for o in e["out"]}
    recomputed = [a for e in own for a in e["in"] if isinstance(a, str) and a in constant and a not in produced]
    eqns = _definitions(program["eqns"][:start], recomputed) + own
    specs = {s["name"]: s for s in program["inputs"]}
    specs.update((o["name"], o) for e in program["eqns"][:start] for o in e["out"])
    consts = {c["name"]: c for c in program.get("consts", [])}
    produced = {o["name"] for e in eqns for o in e["out"]}
    read = list(dict.fromkeys(a for e in eqns for a in e["in"] if isinstance(a, str) and a not in produced))
    later = {a for e in program["eqns"][stop:] for a in e["in"] if isinstance(a, str) and a not in constant}
    later |= {o for o in program["outputs"] if isinstance(o, str)}
    outputs = [o["name"] for e in eqns for o in e["out"] if o["name"] in later]
    inputs = [n for n in read if n not in consts]
    sub = {"format": program["format"],
           "inputs": [{"name": n, "shape": specs[n]["shape"], "dtype": specs[n]["dtype"],
                       **({"role": specs[n]["role"]} if specs[n].get("role") else
                          {"role": "weight"} if n in per_weight_set else {})} for n in inputs],
           "consts": [consts[n] for n in read if n in consts], "eqns": eqns, "outputs": outputs}
    roles = [s.get("role") == "weight" for s in sub["inputs"]]
    return Piece(start, stop, inputs, [n for n in read if n in consts], outputs, sub,
                 region_signature(sub) + repr(roles))


def checked_apart(pieces: list[Piece]) -> bool:
    """Whether validating each distinct piece costs less than validating the whole program: each
    check compiles and runs its programs, so it does when the distinct pieces hold under half of
    the program's equations (an encoder's alike layers), not when most pieces are one of a kind."""
    distinct = {p.signature: p.stop - p.start for p in pieces}
    return 2 * sum(distinct.values()) < pieces[-1].stop


def search_pieces(program: Program, pieces: list[Piece], search_one: Callable[[Program], Search]) -> Search:
    """Search each distinct piece once and stitch the results into one Search of `program`."""
    done: dict[str, tuple[Piece, Search]] = {}
    for piece in pieces:
        if piece.signature not in done:
            done[piece.signature] = (piece, search_one(piece.program))
    searches = [s for _, s in done.values()]
    first = searches[0]
    combined = replace(first, saturation=_combined_reports([s.saturation for s in searches]),
                       fusion=_combined_reports([s.fusion for s in searches]),
                       algebra=_combined_extractions([s.algebra for s in searches]),
                       extraction=_combined_extractions([s.extraction for s in searches]),
                       egraph={k: sum(s.egraph[k] for s in searches) for k in first.egraph},
                       seeded_kernels=sum(s.seeded_kernels for s in searches),
                       pieces={"pieces": len(pieces), "searched": len(done)},
                       searched_pieces=[(piece.program, found.candidate) for piece, found in done.values()],
                       floor=_summed_floors([done[p.signature][1].floor for p in pieces]))
    if any(s.cycle for s in searches):
        return replace(combined, candidate=None, cycle=next(s.cycle for s in searches if s.cycle))
    candidate, groups = _stitch(program, pieces, done, lambda s: (s.candidate, s.groups))
    algebraic, _ = _stitch(program, pieces, done, lambda s: (s.algebraic, []))
    return replace(combined, candidate=candidate, groups=groups, algebraic=algebraic, provenance={})


def _summed_floors(floors: list[EGraphFloor | None]) -> EGraphFloor | None:
    """The floor of the stitched programs: their kernels never span two pieces, so each resource's
    least is the sum of every piece's (a repeated piece once per place it runs)."""
    if any(f is None for f in floors):
        return None
    times = ResourceTimes(*(sum(getattr(f.times, f"{r}_s") for f in floors) for r in FLOOR_RESOURCES))
    return EGraphFloor(times, frozenset.intersection(*(f.exact for f in floors)))


def _combined_reports(reports: list[SaturationReport]) -> SaturationReport:
    """One saturation report for the searched pieces: counts add, the first budget hit wins."""
    fired: Counter = Counter()
    for r in reports:
        fired.update(r.rules_fired)
    stop = next((r.stop_reason for r in reports if r.stop_reason != "saturated"), "saturated")
    return SaturationReport(max(r.iterations for r in reports), sum(r.enodes for r in reports), stop,
                            dict(sorted(fired.items())), sum(r.time_s for r in reports),
                            max(r.fusion_rounds for r in reports))


def _combined_extractions(extractions: list[Extraction]) -> Extraction:
    """The pieces' extractions as one: costs add (per searched piece), methods listed."""
    methods = sorted({e.method for e in extractions})
    return Extraction({}, sum(e.cost for e in extractions), "+".join(methods),
                      sum(e.candidates or 0 for e in extractions))


def _stitch(program: Program, pieces: list[Piece], done: dict[str, tuple[Piece, Search]],
            part: Callable[[Search], tuple[dict, list[list[int]]]]) -> tuple[Program, list[list[int]]]:
    """The whole program from each piece's searched program, renamed: its inputs, consts and
    outputs to the piece's names in `program`, everything else made unique per piece."""
    alias: dict[str, Any] = {}  # a piece output its program returns as an input or literal
    eqns: list[Eqn] = []
    groups: list[list[int]] = []
    for k, piece in enumerate(pieces):
        model, found = done[piece.signature]
        searched, searched_groups = part(found)
        names = dict(zip(model.inputs, (alias.get(n, n) for n in piece.inputs)))
        names.update(zip(model.consts, piece.consts))
        rename = lambda n: names.get(n, f"p{k}_{n}")
        produced = {o["name"] for e in searched["eqns"] for o in e["out"]}
        for out, mine in zip(searched["outputs"], piece.outputs):
            if isinstance(out, str) and out in produced and out not in names:
                names[out] = mine
            else:  # an input, a literal or a value returned twice: later readers use what it is
                alias[mine] = rename(out) if isinstance(out, str) else out
        offset = len(eqns)
        eqns += [{**e, "in": [rename(a) if isinstance(a, str) else a for a in e["in"]],
                  "out": [{**o, "name": rename(o["name"])} for o in e["out"]]} for e in searched["eqns"]]
        groups += [[offset + i for i in g] for g in searched_groups]
    outputs = [alias.get(o, o) if isinstance(o, str) else o for o in program["outputs"]]
    return {**program, "eqns": eqns, "outputs": outputs}, groups
