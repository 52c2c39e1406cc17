"""Wire program -> e-graph: one `let` per equation, so shared subterms stay shared.

First-class primitives become typed term constructors; everything else becomes an opaque node
per output that carries its primitive and params untouched. Every e-class gets its shape and
dtype from the wire program's avals.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from egglog import Action, EGraph, Vec

from rewrites.egglog_internals import Direct, DirectConstructors, deferred_let, direct_union, register
from rewrites.egraphs import Role, close_egraph, open_egraph
from rewrites.params import ParamsTable
from rewrites.terms import (BINARY_OPS, REDUCE_OPS, UNARY_OPS, Term, dtype, float_bits, ivec, literal_value, output,
                            shape, slot_hi, slot_lo)
from wire.json_types import Eqn, Lit, Program, Tensor
from wire.params import strip_none_defaults

# Term's constructors and the analyses, built as declarations (rewrites/egglog_internals.py): ingest makes
# thousands of them, and egglog-python's own call costs ~0.16 ms each.
TERMS = DirectConstructors(Term)
SHAPE, DTYPE, LITERAL_VALUE, SLOT_LO, SLOT_HI, OUTPUT = map(Direct, (shape, dtype, literal_value, slot_lo, slot_hi,
                                                                       output))


@dataclass
class LoadedProgram:
    """An e-graph holding a program and any equivalent alternatives (their outputs unioned), plus
    what is needed to turn extracted terms back into a program."""

    egraph: EGraph
    params: ParamsTable
    programs: list[Program]  # the program, then its alternatives (same inputs and consts)
    n_outputs: int
    envs: list[dict[str, Term]] = field(default_factory=list)  # per program: wire name -> its term (its let)
    timings: dict[str, float] = field(default_factory=dict)
    extra_lets: int = 0  # lets added after ingest (kernel seeds' shared bodies), numbered per e-graph
    seeded: dict[tuple, list] = field(default_factory=dict)  # kernels seeded so far -> their seeds
    role: Role = "algebra"  # which kept e-graphs it came from and returns to (rewrites/egraphs.py)

    @property
    def program(self) -> Program:
        return self.programs[0]

    def fresh_let(self, term: Any) -> tuple[Action, Any]:
        """A let of `term` under a new name, to register with others (`deferred_let`); names stay
        deterministic, as egglog's tie-breaks follow them."""
        self.extra_lets += 1
        return deferred_let(f"$k{self.extra_lets}", term)

    @property
    def env(self) -> dict[str, Term]:
        return self.envs[0]

    def __enter__(self) -> LoadedProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Done with the e-graph: kept for the next load or dropped, on this thread (`close_egraph`)."""
        close_egraph(self.egraph, self.role)


def _rest(params: dict[str, Any], *structural: str) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in structural}


def _ints(value: Any) -> Vec:
    return ivec(value or ())


def _dot(T, args, p, table):
    (lc, rc), (lb, rb) = p["dimension_numbers"]
    return T.dot(args[0], args[1], _ints(lc), _ints(rc), _ints(lb), _ints(rb),
                    table.intern(_rest(p, "dimension_numbers")))


def _select(T, args, p, table):
    return T.select(*args) if len(args) == 3 and not p else None


def _convert(T, args, p, table):
    new_dtype = p["new_dtype"]
    name = new_dtype["dtype"] if isinstance(new_dtype, dict) else str(new_dtype)
    return T.convert(args[0], name, table.intern(_rest(p, "new_dtype")))


def _concat(T, args, p, table):
    if set(p) != {"dimension"}:
        return None
    return T.concat(list(args), p["dimension"])


def _slice(T, args, p, table):
    if set(p) != {"start_indices", "limit_indices", "strides"}:
        return None
    return T.slice(args[0], _ints(p["start_indices"]), _ints(p["limit_indices"]), _ints(p["strides"]))


def _only(keys: set[str], build: Callable) -> Callable:
    """A builder that applies only when the eqn has exactly these params (else: opaque)."""
    return lambda T, args, p, table: build(T, args, p, table) if set(p) == keys else None


# Per-primitive encoders: (constructors, args, wire params, params table) -> term, or None for "keep
# opaque". The constructors are Term's, or Body's for a kernel body (rewrites/kernel_seeds.py).
ENCODERS: dict[str, Callable[[list, dict, ParamsTable], Any]] = {
    "dot_general": _dot,
    "select_n": _select,
    "convert_element_type": _convert,
    "concatenate": _concat,
    "slice": _slice,
    "transpose": _only({"permutation"}, lambda T, a, p, t: T.transpose(a[0], ivec(p["permutation"]))),
    "squeeze": _only({"dimensions"}, lambda T, a, p, t: T.squeeze(a[0], ivec(p["dimensions"]))),
    "integer_pow": _only({"y"}, lambda T, a, p, t: T.integer_pow(a[0], p["y"])),
    "reshape": lambda T, a, p, t: (T.reshape(a[0], ivec(p["new_sizes"]), t.intern(_rest(p, "new_sizes")))
                               if p.get("dimensions") is None else None),  # dimensions: a transposing reshape
    "broadcast_in_dim": lambda T, a, p, t: T.broadcast(
        a[0], ivec(p["shape"]), ivec(p["broadcast_dimensions"]),
        t.intern(_rest(p, "shape", "broadcast_dimensions"))),
    "conv_general_dilated": lambda T, a, p, t: T.conv(
        a[0], a[1], p["dimension_numbers"]["fields"]["rhs_spec"][0], p["dimension_numbers"]["fields"]["out_spec"][1],
        t.intern(p)),
}
for _op in UNARY_OPS:
    ENCODERS[_op] = lambda T, a, p, t, op=_op: T.unary(op, a[0], t.intern(p)) if len(a) == 1 else None
for _op in BINARY_OPS:
    ENCODERS[_op] = lambda T, a, p, t, op=_op: T.binary(op, a[0], a[1], t.intern(p)) if len(a) == 2 else None
# add_any is how autodiff sums cotangents: an add (XLA lowers it to one), so rules and fusion see it
ENCODERS["add_any"] = lambda T, a, p, t: T.binary("add", a[0], a[1], t.intern(p)) if len(a) == 2 and not p else None
for _op in REDUCE_OPS:
    ENCODERS[_op] = lambda T, a, p, t, op=_op: T.reduce(op, a[0], ivec(p["axes"]), t.intern(_rest(p, "axes")))


def _output_unions(loaded: list[tuple[list[Term], list[tuple[str, frozenset[str]] | None]]]) -> list:
    """Each program's output i unioned into the class `output(i)`, except an output that holds
    another program's output i strictly below it (as `select(c, x, x)` holds `x`): that union
    would put a node in its own operand's class, a cycle no extraction can use, on which fusion
    rules inlining the class into itself grow the e-graph exponentially. The value below computes
    the same with strictly less work, so nothing extractable is lost."""
    unions = []
    for tag, (terms, values) in enumerate(loaded):
        for i, term in enumerate(terms):
            mine = values[i]
            holds_another = mine is not None and any(
                theirs is not None and theirs[0] != mine[0] and theirs[0] in mine[1]
                for other, (_, their_values) in enumerate(loaded) if other != tag for theirs in [their_values[i]])
            if not holds_another:
                unions.append(direct_union(OUTPUT(i), term))
    return unions


def _ungrouped_conv(eqn: Eqn) -> bool:
    """A convolution whose kernels can be concatenated along output features (no feature groups)."""
    params = eqn.get("params") or {}
    return (eqn["op"] == "conv_general_dilated" and len(eqn["in"]) == 2
            and params.get("feature_group_count", 1) == 1 and params.get("batch_group_count", 1) == 1)


def literal_term(lit: Lit) -> Term:
    return TERMS.lit(float_bits(float(lit["lit"])), lit["dtype"])  # float() also reads "nan"/"inf"


def literal_roundtrips(lit: Lit) -> bool:
    """Integers beyond 2**53 do not survive the double in `Term.lit`; such eqns stay opaque."""
    value = lit["lit"]
    return isinstance(value, (str, bool, float)) or (isinstance(value, int) and float(value) == value
                                                     and abs(value) <= 2**53)


def encode_typed(constructors: Any, eqn: Eqn, args: list, table: ParamsTable) -> Any:
    """The typed term of a single-output equation built with `constructors` (Term, or Body's with
    `like` bound), or None when it has no typed form (opaque, several outputs, odd params)."""
    encoder = ENCODERS.get(eqn["op"])
    if encoder is None or len(eqn["out"]) != 1:
        return None
    try:
        return encoder(constructors, args, strip_none_defaults(eqn["op"], eqn.get("params") or {}), table)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # params of an unexpected form (or no Body mirror): carry the eqn through untouched


def _split(eqn: Eqn, args: list[Term]) -> list[Term] | None:
    """split(x) -> one static slice per output (views of x, as XLA lowers it), or None."""
    params = eqn.get("params") or {}
    if set(params) != {"sizes", "axis"} or len(args) != 1:
        return None
    axis, start, terms = int(params["axis"]), 0, []
    for out in eqn["out"]:
        shape = list(out["shape"])
        lo = [start if d == axis else 0 for d in range(len(shape))]
        hi = [start + shape[d] if d == axis else shape[d] for d in range(len(shape))]
        terms.append(TERMS.slice(args[0], lo, hi, ()))
        start += shape[axis]
    return terms


def encode_eqn(eqn: Eqn, args: list[Term], table: ParamsTable) -> list[Term]:
    """The terms for each output of one equation."""
    term = encode_typed(TERMS, eqn, args, table)
    if term is not None:
        return [term]
    if eqn["op"] == "split" and (slices := _split(eqn, args)) is not None:
        return slices
    return [TERMS.opaque(eqn["op"], _opaque_extra(eqn, table), args, i) for i in range(len(eqn["out"]))]


def _opaque_extra(eqn: Eqn, table: ParamsTable, literals: list | None = None) -> int:
    """An opaque eqn keeps everything needed to re-emit it, including outputs nothing uses."""
    entry = {"primitive": eqn["op"], "params": eqn.get("params") or {},
             "out": [[list(o["shape"]), o["dtype"]] for o in eqn["out"]]}
    if literals:
        entry["literals"] = literals
    return table.intern(entry)


def _merge_keys(eqn: Eqn) -> list[tuple[tuple[str, str, str], Any]]:
    """((group, shared operand, dims), other operand) for each way a merge candidate may share."""
    lhs, rhs = eqn["in"]
    dims = json.dumps([eqn["op"], eqn["params"].get("dimension_numbers")])
    return [((group, shared, dims), other) for group, shared, other in (("input", lhs, rhs), ("weight", rhs, lhs))
            if isinstance(shared, str)]


def let_name(program: int, eqn: int, out: int) -> str:
    """The let of an equation's output: `e{eqn}_{out}` for the program, `a{k}e{eqn}_{out}` for
    its k-th alternative (rewrites/egraph_view.py reads them back as class origins)."""
    return f"{f'a{program}' if program else ''}e{eqn}_{out}"


def ingest(program: Program, alternatives: Sequence[Program] = (), role: Role = "algebra"
           ) -> LoadedProgram:
    """Load a (type-checked) wire program into an empty e-graph kept for `role`'s rules; each
    alternative (an equivalent program over the same inputs and consts) is loaded too, its outputs
    unioned with the program's."""
    loader = _Loader(program, alternatives)
    loaded_outputs, envs = [], []
    for tag in range(len(loader.programs)):
        loaded_outputs.append(loader.load(tag))
        envs.append(dict(loader.env))
    commands = [*loader.lets, *loader.analyses, *_output_unions(loaded_outputs)]
    egraph = open_egraph(role)
    try:
        register(egraph, commands)
    except BaseException:  # the caller gets no load to close
        close_egraph(egraph, role)
        raise
    return LoadedProgram(egraph, loader.table, loader.programs, len(program["outputs"]), envs, role=role)


class _Loader:
    """The lets and analysis facts that load a program and its alternatives, built before any of
    them reaches egglog (they are registered together, in one call)."""

    def __init__(self, program: Program, alternatives: Sequence[Program]):
        self.programs = [program, *alternatives]
        self.table = ParamsTable()
        self.env: dict[str, Term] = {}  # of the program being loaded: wire name -> its term (its let)
        self.lets: list[Action] = []
        self.analyses: list[Action] = []
        self.literals: dict[tuple, Term] = {}
        # Merge-candidate numbering (terms.slot_lo): matmuls sharing an operand get consecutive slots
        # unless one's other operand might depend on an earlier candidate (its topological level is
        # higher than that candidate's), as in an RNN's recurrent h@W_h: merging those would make a
        # cycle. Such a matmul starts a new run, one slot apart, so runs never look adjacent. A matmul
        # whose other operand is already a concatenation is a merge result, not a candidate; one whose
        # operand no other candidate shares has nothing to merge with and gets no slot (a chain's
        # matmuls: four analysis facts each saved).
        self.levels: dict[str, int] = {}
        self.concatenated: set[str] = set()
        self.runs: dict[tuple, list[int]] = {}  # (group, shared operand, dims) -> [next slot, lowest level in run]
        self.sharing = Counter(key for eqn in program["eqns"] if _is_merge_candidate(eqn)
                               for key, _ in _merge_keys(eqn))
        leaves = [*program["inputs"], *program.get("consts", [])]
        for i, spec in enumerate(leaves):
            self.bind(spec["name"], TERMS.var(i), spec, f"x{i}")
        self.leaves = dict(self.env)
        # An equation computing what one loaded before did (same op and params over the same terms:
        # mostly the alternatives' shared parts) is bound to that one's terms instead of new ones:
        # egglog would find the same classes, and building a term costs ~0.3 ms in egglog-python.
        self.first_binding: dict[str, str] = {s["name"]: f"x{i}" for i, s in enumerate(leaves)}
        self.loaded: dict[tuple, list[tuple[Term, str]]] = {}

    def bind(self, name: str, term: Term, spec: Tensor | None, let: str) -> None:
        """`spec` None: `term` is bound already, and its class has its shape and dtype."""
        action, ref = deferred_let(let, term)
        self.lets.append(action)
        self.env[name] = ref
        if spec is not None:
            self.analyses.extend([SHAPE.set(ref, to=ivec(spec["shape"])), DTYPE.set(ref, to=spec["dtype"])])

    def arg_term(self, arg: Any) -> Term:
        if isinstance(arg, str):
            return self.env[arg]
        key = (repr(arg["lit"]), arg["dtype"])
        if key not in self.literals:
            self.literals[key] = term = literal_term(arg)
            self.analyses.extend([SHAPE.set(term, to=()), DTYPE.set(term, to=arg["dtype"]),
                                  LITERAL_VALUE.set(term, to=float(arg["lit"]))])
        return self.literals[key]

    def number_merge_candidate(self, eqn: Eqn, level: int) -> None:
        for key, other in _merge_keys(eqn):
            if self.sharing[key] < 2 or other in self.concatenated:
                continue
            run = self.runs.setdefault(key, [0, level])
            if isinstance(other, str) and self.levels.get(other, 0) >= run[1]:
                run[0] += 1  # leave a gap: a new run
                run[1] = level
            slot = run[0]
            run[0] += 1
            run[1] = min(run[1], level)
            ref = self.env[eqn["out"][0]["name"]]
            self.analyses.extend([SLOT_LO.set(key[0], ref, to=slot), SLOT_HI.set(key[0], ref, to=slot)])

    def load(self, tag: int) -> tuple[list[Term], list[tuple[str, frozenset[str]] | None]]:
        """programs[tag] bound over the shared leaves: its output terms and `output_values`."""
        self.env.clear()
        self.env.update(self.leaves)
        self.levels.clear()
        return self.load_eqns(tag), self.output_values(tag)

    def load_eqns(self, tag: int) -> list[Term]:
        for i, eqn in enumerate(self.programs[tag]["eqns"]):
            ins = eqn["in"]
            key = (eqn["op"], json.dumps(eqn.get("params"), sort_keys=True, default=str),
                   tuple(self.first_binding[a] if isinstance(a, str) else json.dumps(a, sort_keys=True) for a in ins))
            level = 1 + max((self.levels.get(a, 0) for a in ins if isinstance(a, str)), default=0)
            reused = self.loaded.get(key)
            if reused is not None:
                terms = [ref for ref, _ in reused]
            elif all(isinstance(a, str) or literal_roundtrips(a) for a in ins):
                terms = encode_eqn(eqn, [self.arg_term(a) for a in ins], self.table)
            else:
                terms = _opaque_with_literal_args(eqn, self.table, self.env)
            for k, (term, spec) in enumerate(zip(terms, eqn["out"])):
                self.bind(spec["name"], term, None if reused else spec, let_name(tag, i, k))
                self.first_binding[spec["name"]] = reused[k][1] if reused else let_name(tag, i, k)
                self.levels[spec["name"]] = level
            self.loaded.setdefault(key, [(self.env[o["name"]], self.first_binding[o["name"]]) for o in eqn["out"]])
            if tag:  # merge numbering orders the program's own candidates; alternatives are never merged
                continue
            if _is_merge_candidate(eqn):
                self.number_merge_candidate(eqn, level)
            elif eqn["op"] == "concatenate":
                self.concatenated.update(o["name"] for o in eqn["out"])
        return [self.env[o] if isinstance(o, str) else self.arg_term(o) for o in self.programs[tag]["outputs"]]

    def output_values(self, tag: int) -> list[tuple[str, frozenset[str]] | None]:
        """Per output of programs[tag]: its value (by first binding) and the values strictly below
        it; None for a literal output."""
        producers = {o["name"]: eqn for eqn in self.programs[tag]["eqns"] for o in eqn["out"]}
        found = []
        for out in self.programs[tag]["outputs"]:
            if not isinstance(out, str):
                found.append(None)
                continue
            below, stack = set(), [a for a in producers[out]["in"] if isinstance(a, str)] if out in producers else []
            while stack:
                name = stack.pop()
                if self.first_binding[name] not in below:
                    below.add(self.first_binding[name])
                    stack += [a for a in producers[name]["in"] if isinstance(a, str)] if name in producers else []
            found.append((self.first_binding[out], frozenset(below)))
        return found


def _is_merge_candidate(eqn: Eqn) -> bool:
    return eqn["op"] == "dot_general" and len(eqn["in"]) == 2 or _ungrouped_conv(eqn)


def _opaque_with_literal_args(eqn: Eqn, table: ParamsTable, env: dict[str, Term]) -> list[Term]:
    """An eqn with a literal Term.lit cannot hold keeps its literals in the params table instead."""
    extra = _opaque_extra(eqn, table, [[k, a] for k, a in enumerate(eqn["in"]) if not isinstance(a, str)])
    args = [env[a] for a in eqn["in"] if isinstance(a, str)]
    return [TERMS.opaque(eqn["op"], extra, args, i) for i in range(len(eqn["out"]))]

