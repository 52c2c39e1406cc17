"""Key-blocked attention kernels realized as what they were priced as: each becomes one
`flash_attention` equation (wire/flash_attention.py, a fused Pallas kernel) on canonical operands.

Every axis of the attention's values is named from the probabilities the mix reads,
[batch..., queries, keys]: views and transposes that keep the keys last carry the names back to
the scores, and the score product's dimension numbers carry them to Q and K, as the mix's carry
them to V. Q, K, V and each value the score transform reads from outside (a mask's positions, a
bias, a row of a padding mask) are then transposed, broadcast and reshaped to [batch, rows, ...]
by standard ops; the transform's elementwise ops become a nested program on one score block. A
shape this cannot name stays as the ops it was (the reason is returned as a note).
"""
from __future__ import annotations

import math
from typing import Any

from costmodel.key_blocking import KernelSteps, Step, key_region
from lowering.attention_layout import (CannotRealize, Emitter, Labels, dot_labels, dot_out_labels, spec,
                                       view_input_labels)
from lowering.kernels import Kernel, avals_of
from lowering.splice import splice
from wire.json_types import Eqn, Program
from wire.primitives import PRIMITIVES

Node = tuple[str, tuple[str | None, ...]]  # a value of the score transform in one layout


def _elementwise(op: str) -> bool:
    return op != "iota" and op in PRIMITIVES and PRIMITIVES[op].role == "elementwise"


def _literal_zero(operand: Any) -> bool:
    return isinstance(operand, dict) and "lit" in operand and operand["lit"] in (0, 0.0, False)


class _Realization:
    """One key-blocked kernel's attention as the equations computing it through `flash_attention`."""

    def __init__(self, view: KernelSteps, program: list[dict[str, Any]], avals, prefix: str):
        self.view = view
        self.eqns = {e["out"][0]["name"]: e for e in program}  # the whole program's, by first output
        self.index = {name: i for i, name in enumerate(self.eqns)}
        self.outside: dict[str, Step] = {}  # a value made outside the kernel from positions alone
        self._positional: dict[str, bool] = {}
        self.out = Emitter(prefix, avals)
        self.labels: dict[str, Labels] = {}
        self.sizes: dict[str, int] = {}
        self.batch: list[str] = []
        self.score = ""
        self._from_scores: dict[str, bool] = {}

    def name(self, key: str, labels: Labels) -> None:
        if self.labels.setdefault(key, labels) != labels:
            raise CannotRealize(f"{key} is read in two layouts")

    def shape(self, key: str | None) -> tuple[int, ...]:
        return self.view.shape(key)

    def through_views(self, key: str) -> str:
        step = self.view.producer.get(key)
        while step is not None and self.view.keeps_rows(step):
            self.name(step.ins[0], view_input_labels(self.view, step, self.labels[key]))
            key = step.ins[0]
            step = self.view.producer.get(key)
        return key

    def equations(self, mix: Step, side: int, score: Step, blocks: tuple[int, int]) -> list[Eqn]:
        shape = self.shape(mix.ins[side])
        batch = [f"b{i}" for i in range(len(shape) - 2)]
        self.sizes, self.batch = dict(zip([*batch, "q", "k"], shape)), batch
        self.name(mix.ins[side], [*batch, "q", "k"])
        keep, probabilities = self.row_where(self.through_views(mix.ins[side]))
        e = self.view.softmax_input(probabilities)
        if e is None or self.shape(e) != self.shape(probabilities):
            raise CannotRealize("the probabilities are not a softmax over the keys")
        self.name(e, self.labels[probabilities])
        bq, bk = min(blocks[0], self.sizes["q"]), min(blocks[1], self.sizes["k"])
        self.score = score.out
        transform, extras = self.transform(e, score, bq, bk)
        ranks = (len(self.shape(score.ins[0])), len(self.shape(score.ins[1])))
        lhs, rhs = (dot_labels(score, ranks, s, self.labels[score.out]) for s in (0, 1))
        if "k" not in rhs or "k" in lhs or "q" in rhs:
            raise CannotRealize("the keys are not the score product's right operand's")
        depth = [label for label in lhs if label and label.startswith("c")]
        self.sizes.update((label, self.shape(score.ins[0])[lhs.index(label)]) for label in depth)
        q = self.out.canonical(score.ins[0], lhs, [batch, ["q"], depth], self.sizes, True)
        k, key_group = self.shared(score.ins[1], rhs, [batch, ["k"], depth])
        v, width, out_labels = self.values(mix, side)
        v, value_group = self.shared(v, self.labels[v], [batch, ["k"], width])
        dtype = self.out.avals[mix.out][1]
        params = {"score_transform": {"program": transform}, "query_block": bq, "key_block": bk,
                  "key_group": key_group, "value_group": value_group,
                  "zero_rows": keep is not None, "out_dtype": dtype}
        canonical = [math.prod(self.sizes[b] for b in batch), self.sizes["q"], math.prod(self.sizes[w] for w in width)]
        operands = [q, k, v, *extras, *([keep] if keep else [])]
        result = self.out.emit("flash_attention", operands, canonical, dtype, params)
        self.restore(result, [*batch, "q", *width], out_labels, mix.out)
        return self.out.eqns

    def shared(self, key: str, labels: Labels, groups: list[list[str]]) -> tuple[str, int]:
        """K or V canonical, and how many consecutive batch rows of the queries share each of its
        rows: a value repeated along the last batch axis (jnp.repeat of GQA's K/V heads, a
        broadcast adding a group axis after it, merged by a reshape) is read unrepeated."""
        while True:
            repeat = self.repeated(key, labels)
            if repeat is not None:
                source, source_labels, group = repeat
                last = self.batch[-1]
                sizes = {**self.sizes, last: self.sizes[last] // group}
                return self.out.canonical(source, source_labels, groups, sizes, True), group
            eqn = self.eqns.get(key)
            step = Step.of(eqn) if eqn is not None and len(eqn["out"]) == 1 else None
            if step is None or not (step.op == "transpose" or self.view.unit_view(step)):
                return self.out.canonical(key, labels, groups, self.sizes, True), 1
            key, labels = step.ins[0], view_input_labels(self.view, step, labels)

    def repeated(self, key: str, labels: Labels) -> tuple[str, Labels, int] | None:
        """(the value, its axes' names, the repeat count) where `key` repeats each row of a value
        along the last batch axis consecutively; None otherwise."""
        reshape = self.eqns.get(key)
        if not self.batch or reshape is None or reshape["op"] != "reshape" or not isinstance(reshape["in"][0], str):
            return None
        broadcast = self.eqns.get(reshape["in"][0])
        if broadcast is None or broadcast["op"] != "broadcast_in_dim" or not isinstance(broadcast["in"][0], str):
            return None
        source, wide, merged = broadcast["in"][0], self.shape(broadcast["out"][0]["name"]), self.shape(key)
        mapped = list(broadcast["params"]["broadcast_dimensions"])
        added = [axis for axis in range(len(wide)) if axis not in mapped]
        if len(added) != 1 or added[0] == 0 or [wide[d] for d in mapped] != list(self.shape(source)):
            return None
        axis, group = added[0] - 1, wide[added[0]]  # the repeated axis, and its repeats right after it
        joined = [*wide[:axis], wide[axis] * group, *wide[axis + 2:]]
        if [d for d in joined if d != 1] != [d for d in merged if d != 1]:
            return None  # the reshape does more than merge the repeats (and add or drop unit axes)
        outer = iter(label for label, size in zip(labels, merged) if size != 1)
        joined_labels = [next(outer) if size != 1 else None for size in joined]
        if joined_labels[axis] != self.batch[-1]:
            return None
        source_shape = self.shape(source)
        return source, [joined_labels[d if d <= axis else d - 1] if size != 1 else None
                        for d, size in zip(mapped, source_shape)], group

    def row_where(self, key: str) -> tuple[str | None, str]:
        """A where replacing whole rows of the probabilities by zero: the mask of the rows kept
        (canonical) and the probabilities it selects from; (None, key) without one."""
        step = self.view.producer.get(key)
        if step is None or step.op != "select_n":
            return None, key
        eqn = self.eqns[step.out]
        constant = [i for i in (1, 2) if _literal_zero(eqn["in"][i]) or self.zero_fill(eqn["in"][i])]
        if len(constant) != 1 or self.out.avals[step.ins[0]][1] != "bool":
            raise CannotRealize("rows replaced by something other than zeros")
        rest = step.ins[3 - constant[0]]
        self.name(rest, self.labels[key])
        predicate = self.view.producer.get(step.ins[0])
        if predicate is None or predicate.op != "broadcast_in_dim" or predicate.ins[0] is None:
            raise CannotRealize("a where over the probabilities not by rows")
        rows = self.broadcast_operand_labels(predicate, self.labels[key])
        keep = self.out.canonical(predicate.ins[0], rows, [self.batch, ["q"], []], self.sizes, False)
        if constant[0] == 2:  # the zeros where the predicate holds
            keep = self.out.emit("not", [keep], list(self.out.avals[keep][0]), "bool", {})
        return keep, rest

    def zero_fill(self, operand: Any) -> bool:
        step = self.view.producer.get(operand) if isinstance(operand, str) else None
        return step is not None and step.op == "broadcast_in_dim" and _literal_zero(self.eqns[step.out]["in"][0])

    def broadcast_operand_labels(self, step: Step, labels: Labels) -> Labels:
        operand = self.shape(step.ins[0])
        return [labels[axis] if operand[i] != 1 else None
                for i, axis in enumerate(step.params["broadcast_dimensions"])]

    def values(self, mix: Step, side: int) -> tuple[str, list[str], Labels]:
        """V, the names of its free (width) axes, and the names of the mix's result axes."""
        v = mix.ins[1 - side]
        ranks = [len(self.shape(k)) for k in mix.ins]
        (lc, rc), (lb, rb) = mix.params["dimension_numbers"]
        batch, contracting = [list(lb), list(rb)], [list(lc), list(rc)]
        p_labels, v_labels = self.labels[mix.ins[side]], [None] * ranks[1 - side]
        for p_axis, v_axis in zip(batch[side], batch[1 - side]):
            v_labels[v_axis] = p_labels[p_axis]
        v_labels[contracting[1 - side][0]] = "k"
        free = [a for a in range(ranks[1 - side]) if a not in batch[1 - side] + contracting[1 - side]]
        width = [f"w{i}" for i in range(len(free))]
        for axis, label in zip(free, width):
            v_labels[axis] = label
            self.sizes[label] = self.shape(v)[axis]
        self.name(v, v_labels)
        operands = (p_labels, v_labels) if side == 0 else (v_labels, p_labels)
        return v, width, dot_out_labels(mix, (ranks[0], ranks[1]), operands)

    def restore(self, result: str, canonical: list[str], labels: Labels, out: str) -> None:
        """The fused kernel's [batch, queries, width] result as the mix's result, named as it."""
        eqns = self.out.eqns
        full = [self.sizes[label] for label in canonical]
        if list(self.out.avals[result][0]) != full:
            result = self.out.reshape(result, full)
        if labels != canonical:
            permutation = [canonical.index(label) for label in labels]
            result = self.out.emit("transpose", [result], [full[p] for p in permutation], self.out.avals[result][1],
                                   {"permutation": permutation})
        eqns[-1]["out"][0]["name"] = out
        self.out.avals[out] = self.out.avals.pop(result)

    def transform(self, e: str, score: Step, bq: int, bk: int) -> tuple[Program, list[str]]:
        """The score transform as a program on one [bq, bk] block, and its extra operands (canonical).
        What the kernel computes elementwise and by views is computed per block (a causal or
        sliding-window mask from positions); a value it reads from outside or makes another way
        is an extra operand, read by blocks. A value made from positions alone may be read in
        several layouts (one iota as the query and as the key positions): each is a node."""
        kinds: dict[Node, str] = {}
        todo: list[Node] = [(e, tuple(self.labels[e]))]
        while todo:
            node = todo.pop()
            key, labels = node
            if node in kinds:
                continue
            if self.from_scores(key):
                self.name(key, list(labels))  # the scores have one layout
            step = self.step(key)
            if key == score.out:
                kinds[node] = "scores"
            elif step is None:
                kinds[node] = "leaf"
            elif step.op == "iota":
                kinds[node] = "iota" if labels[step.params["dimension"]] in ("q", "k", None) else "leaf"
            elif step.op == "broadcast_in_dim":
                kinds[node] = "fill" if step.ins[0] is None else "view"
                if step.ins[0] is not None:
                    todo.append((step.ins[0], tuple(self.broadcast_operand_labels(step, list(labels)))))
            elif step.op == "transpose" or self.view.unit_view(step):
                kinds[node] = "view"
                todo.append((step.ins[0], tuple(view_input_labels(self.view, step, list(labels)))))
            elif _elementwise(step.op):
                kinds[node] = "elementwise"
                todo += [(k, tuple(self.operand_labels(step, k, labels))) for k in step.ins if k is not None]
            elif self.from_scores(key):
                raise CannotRealize(f"{step.op} in the score transform")
            else:
                kinds[node] = "leaf"
        return self.block_program(kinds, (e, tuple(self.labels[e])), score, bq, bk)

    def step(self, key: str) -> Step | None:
        """The step making `key` in the kernel, or outside it where it is made from positions and
        literals alone (a causal mask a compiler would precompute): per block, it costs no reads."""
        if key in self.view.producer:
            return self.view.producer[key]
        return self.outside[key] if self.positional(key) else None

    def positional(self, key: str | None) -> bool:
        if key is None:
            return True
        if key not in self._positional:
            eqn = self.eqns.get(key)
            step = Step.of(eqn) if eqn is not None and len(eqn["out"]) == 1 else None
            self._positional[key] = step is not None and (
                step.op == "iota" or (step.op in ("broadcast_in_dim", "transpose") or self.view.unit_view(step)
                                      or _elementwise(step.op)) and all(map(self.positional, step.ins)))
            if self._positional[key]:
                self.outside[key] = step
        return self._positional[key]

    def from_scores(self, key: str) -> bool:
        """Computed in the kernel from the scores."""
        if key not in self._from_scores:
            step = self.view.producer.get(key)
            self._from_scores[key] = key == self.score or step is not None and step.op != "dot_general" and \
                any(self.from_scores(k) for k in step.ins if k is not None)
        return self._from_scores[key]

    def operand_labels(self, step: Step, operand: str, labels: tuple[str | None, ...]) -> Labels:
        """An elementwise operand's axes named as its result's (a size-1 axis broadcasts: unnamed)."""
        shape, own = self.shape(operand), self.shape(step.out)
        if len(shape) not in (0, len(own)) or any(s not in (1, o) for s, o in zip(shape, own)):
            raise CannotRealize(f"{step.op} reads {operand} of shape {list(shape)}")
        return [label if size != 1 else None for label, size in zip(labels, shape)]

    def block_program(self, kinds: dict[Node, str], e: Node, score: Step, bq: int, bk: int
                      ) -> tuple[Program, list[str]]:
        block = [bq, bk]
        order = sorted(kinds, key=lambda node: self.index[node[0]] if self.step(node[0]) else -1)
        names: dict[Node, str] = {}
        inputs = [spec("scores", block, self.out.avals[score.out][1]), spec("query_positions", block, "int32"),
                  spec("key_positions", block, "int32")]
        eqns, extras = [], []
        scalar: dict[str, bool] = {}

        def emit(op: str, ins: list[Any], dtype: str, params: dict[str, Any], shape: list[int] = block) -> str:
            eqns.append({"op": op, "in": ins, "out": [spec(f"e{len(eqns)}", shape, dtype)], "params": params})
            scalar[eqns[-1]["out"][0]["name"]] = not shape
            return eqns[-1]["out"][0]["name"]

        def broadcast(operand: Any, dtype: str) -> str:
            """A scalar (a literal, or a value made in the transform from literals) broadcast to the block."""
            return emit("broadcast_in_dim", [operand], dtype, {"shape": block, "broadcast_dimensions": [],
                                                               "sharding": None})

        for node in order:
            (key, labels), kind = node, kinds[node]
            step, dtype = self.step(key), self.out.avals[key][1]
            if kind == "scores":
                names[node] = "scores"
            elif kind == "view":
                inner = (self.broadcast_operand_labels(step, list(labels)) if step.op == "broadcast_in_dim"
                         else view_input_labels(self.view, step, list(labels)))
                operand = names[(step.ins[0], tuple(inner))]
                # a scalar made from literals stays one until a view gives it the block's shape
                names[node] = broadcast(operand, dtype) if self.shape(key) and scalar.get(operand) else operand
            elif kind == "elementwise":
                ins = [a if isinstance(a, dict) else names[(a, tuple(self.operand_labels(step, a, labels)))]
                       for a in self.eqns[key]["in"]]
                names[node] = emit(step.op, ins, dtype, self.eqns[key].get("params") or {},
                                   block if self.shape(key) else [])
            elif kind == "fill":
                names[node] = broadcast(self.eqns[key]["in"][0], dtype)
            elif kind == "iota":
                positions = {"q": "query_positions", "k": "key_positions"}.get(labels[step.params["dimension"]])
                names[node] = emit("convert_element_type", [positions], dtype,
                                   {"new_dtype": dtype, "weak_type": False, "sharding": None}) if positions else \
                    broadcast({"lit": 0, "dtype": dtype}, dtype)
            else:
                names[node] = self.extra(key, list(labels), step, extras)
                inputs.append(spec(names[node], block, dtype))
        program = {"format": "optu.jaxpr/v1", "inputs": inputs, "consts": [], "eqns": eqns, "outputs": [names[e]]}
        return program, extras

    def extra(self, key: str, labels: Labels, step: Step | None, extras: list[str]) -> str:
        """A value the transform reads from outside, made canonical as an extra operand of the kernel:
        a broadcast's operand rather than the broadcast, an iota along a batch axis as one row of it."""
        if step is not None and step.op == "broadcast_in_dim" and step.ins[0] is not None:
            key, labels = step.ins[0], self.broadcast_operand_labels(step, labels)
        elif step is not None and step.op == "iota":
            label = labels[step.params["dimension"]]
            key = self.out.emit("iota", [], [self.sizes[label]], self.out.avals[key][1],
                                {**self.eqns[key]["params"], "shape": [self.sizes[label]], "dimension": 0})
            labels = [label]
        extras.append(self.out.canonical(key, labels, [self.batch, ["q"], ["k"]], self.sizes, False))
        return f"x{len(extras)}"

def _fused(eqns: list[Eqn], avals, kernel: Kernel) -> tuple[int, list[Eqn]]:
    """The index of a key-blocked kernel's mix and the equations computing it through
    `flash_attention`; raises CannotRealize."""
    indices = sorted(set(kernel.eqns))
    steps = [Step.of(eqns[i]) for i in indices]
    region = key_region(steps, avals, set(kernel.outputs))
    if region is None or "query_block" not in kernel.tiling:
        raise CannotRealize("its attention is not one the kernel program prices as blocked")
    mix = region.mix_product
    side = 0 if mix.ins[1] == region.values else 1
    index = next(i for i in indices if eqns[i]["out"][0]["name"] == mix.out)
    realization = _Realization(KernelSteps(steps, avals), eqns, dict(avals), f"fa{kernel.id}")
    return index, realization.equations(mix, side, region.score_product,
                                        (kernel.tiling["query_block"], kernel.tiling["key_block"]))


def unrealizable(program: Program, kernel: Kernel) -> str | None:
    """Why a key-blocked kernel of `program` cannot be returned as one fused kernel; None when it can."""
    try:
        _fused(program["eqns"], avals_of(program), kernel)
    except CannotRealize as reason:
        return str(reason)
    return None


def realize_attention(program: Program, kernels: list[Kernel]) -> tuple[Program, list[Kernel], list[str]]:
    """`program` with each key-blocked kernel's attention computed by one `flash_attention`
    equation, its kernels (copies) with their equation indices renumbered (a kernel holds the equations added for its
    attention, none that became dead), and a note per kernel left as ops and why."""
    eqns, avals = program["eqns"], avals_of(program)
    replaced: dict[int, list[Eqn]] = {}
    owner: dict[int, Kernel] = {}
    notes = []
    for kernel in kernels:
        if kernel.kind != "key_blocked":
            continue
        try:
            index, replaced[index] = _fused(eqns, avals, kernel)
            owner[index] = kernel
        except CannotRealize as reason:
            notes.append(f"kernel {kernel.id} (key_blocked) runs as JAX ops, not one Pallas kernel: {reason}")
    if not replaced:
        return program, kernels, notes
    notes.insert(0, f"{len(replaced)} key-blocked attention kernel(s) returned as one fused Pallas kernel each "
                    "(flash_attention)")
    return *splice(program, kernels, replaced, owner), notes
