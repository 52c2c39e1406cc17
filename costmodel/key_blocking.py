"""Key-blocked (flash) attention kernels: a fused kernel computing softmax(E(S)) @ V, with S a
product's scores and E any elementwise work on them (scale, mask, bias, softcap), runs over blocks
of keys holding a running row max, sum and output on chip (the online softmax identity,
rewrites/online_softmax.py, applied block by block), so no score-sized value leaves the chip.

A conventional compiler tiles the same fused kernel over blocks of query rows, each with every key
(no online softmax: the scores of a row are all on chip before its softmax): that is the one key
block option, open to the baseline and to exact mode too.

Priced by the kernel's own work with the score-sized intermediates replaced by one block's tiles,
each product priced per block (a stationary tile loaded per block: more loads for smaller query
blocks) and the keys and values read from HBM once per query block. The query and key block sizes
are the cheapest under the SRAM capacity; a kernel whose plain form is cheaper keeps it. Extraction
(costmodel/kernel_cost.py) and the kernel program (lowering/kernels.py) describe a kernel as the
same `Step`s, so both price it alike.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from costmodel.formulas import dtype_bytes, vector_cost
from costmodel.op_cost import Aval, OpCost, nbytes, op_cost
from costmodel.profile import HardwareProfile
from wire.json_types import Eqn

# Ops a value passes through unchanged in meaning for the row statistics: views, and the softmax's
# stop_gradient (a forward no-op).
_TRANSPARENT = frozenset(["broadcast_in_dim", "reshape", "expand_dims", "squeeze", "stop_gradient", "copy"])
_ELEMENTWISE_ARITY = {"select_n": 3}
MIN_BLOCK = 16  # smaller query or key blocks only add per-block overheads


@dataclass(frozen=True)
class Step:
    """One op of a kernel: its primitive, params, operand keys (None for a literal) and result key."""

    op: str
    params: dict[str, Any]
    ins: tuple[str | None, ...]
    out: str

    @classmethod
    def of(cls, eqn: Eqn) -> Step:
        """A wire equation as a step (its first output)."""
        return cls(eqn["op"], eqn.get("params") or {}, tuple(a if isinstance(a, str) else None for a in eqn["in"]),
                   eqn["out"][0]["name"])


@dataclass(frozen=True)
class KeyRegion:
    """The attention inside a kernel: scores [batch..., queries, keys], the products making and
    consuming them, and the score-sized values that the blocked form never holds whole."""

    scores: tuple[str, ...]  # score-sized values computed in the kernel
    score_product: Step
    mix_product: Step
    values: str  # the mix's other operand (V)
    batch: int
    queries: int
    keys: int


def _core(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape without its unit axes: what views that add or drop them (jnp.matmul's squeezes) keep."""
    return tuple(d for d in shape if d != 1)


def _dims(step: Step) -> tuple[list[int], list[int], list[int], list[int]]:
    (lc, rc), (lb, rb) = step.params["dimension_numbers"]
    return list(lc), list(rc), list(lb), list(rb)


class KernelSteps:
    """A kernel's steps with their producers and shapes: what the attention's shape is read from."""

    def __init__(self, steps: list[Step], avals: dict[str, Aval]):
        self.steps, self.avals = steps, avals
        self.producer = {s.out: s for s in steps}

    def shape(self, key: str | None) -> tuple[int, ...]:
        return () if key is None or key not in self.avals else tuple(self.avals[key][0])

    def unit_view(self, step: Step) -> bool:
        """A view that only adds or drops unit axes."""
        return (
            step.op in (_TRANSPARENT | {"transpose"})
            and step.op != "stop_gradient"
            and step.ins[0] is not None
            and math.prod(self.shape(step.out)) == math.prod(self.shape(step.ins[0]))
            and _core(self.shape(step.out)) == _core(self.shape(step.ins[0]))
        )

    def keeps_rows(self, step: Step) -> bool:
        """A unit-axis view, or a transpose of the leading axes that keeps the last (the keys) last:
        every row of scores stays a row (jax.nn.dot_product_attention's head-group transposes)."""
        if step.op == "transpose":
            permutation = list(step.params["permutation"])
            return permutation[-1] == len(permutation) - 1
        return self.unit_view(step)

    def unviewed(self, key: str) -> str:
        while key in self.producer and self.keeps_rows(self.producer[key]):
            key = self.producer[key].ins[0]
        return key

    def through(self, key: str | None) -> str | None:
        """The value a chain of transparent ops (and row-stat clamps by a literal, and the casts a
        low-precision softmax sums in float32 with) starts from."""
        while key in self.producer:
            step = self.producer[key]
            if step.op in _TRANSPARENT or step.op == "convert_element_type" or self.unit_view(step):
                key = step.ins[0]
            elif step.op in ("max", "min") and len(step.ins) == 2 and () in map(self.shape, step.ins):
                key = next(k for k in step.ins if self.shape(k) != ())  # jnp.max's initial=-inf
            else:
                break
        return key

    def views_of(self, key: str) -> list[str]:
        """`key`, the value it is a view of (a transpose, reshape or broadcast), and so on back as far
        as views go: the last is what the kernel reads or computes."""
        chain = [key]
        while chain[-1] in self.producer and self.producer[chain[-1]].op in _TRANSPARENT | {"transpose"} and \
                self.producer[chain[-1]].ins[0] is not None:
            chain.append(self.producer[chain[-1]].ins[0])
        return chain

    def row_reduced(self, key: str | None, reduction: str, rank: int) -> str | None:
        """x where `key` is (a view of) reduction(x) over the last of x's `rank` axes."""
        step = self.producer.get(self.through(key))
        if step is None or step.op != reduction or list(step.params.get("axes", ())) != [rank - 1]:
            return None
        return step.ins[0]

    def softmax_input(self, p: str) -> str | None:
        """E where p = softmax(E) over its last axis: the idiom, or jax.nn.softmax's decomposition;
        also through a where that replaces whole rows by a constant (torch's zeros for a row whose
        keys are all masked), which a blocked kernel applies to its output rows."""
        step = self.producer.get(p)
        rank = len(self.shape(p))
        if step is None:
            return None
        if step.op == "select_n" and len(step.ins) == 3 and self.row_broadcast(step.ins[0], rank):
            constant = [k for k in step.ins[1:] if k is None or self.row_broadcast(k, rank, literal=True)]
            rest = [k for k in step.ins[1:] if k not in constant]
            return self.softmax_input(rest[0]) if len(constant) == 1 and len(rest) == 1 else None
        if step.op == "softmax":
            return step.ins[0]
        if step.op != "div":
            return None
        numerator, denominator = step.ins
        exp = self.producer.get(numerator)
        summed = self.through(self.row_reduced(denominator, "reduce_sum", rank))
        if exp is None or exp.op != "exp" or summed != numerator:
            return None
        shifted = self.producer.get(exp.ins[0])
        if shifted is None or shifted.op != "sub":
            return None
        e, row_max = shifted.ins
        reduced = self.row_reduced(row_max, "reduce_max", rank)
        return e if e is not None and reduced is not None and self.unviewed(reduced) == self.unviewed(e) else None

    def row_broadcast(self, key: str | None, rank: int, literal: bool = False) -> bool:
        """A broadcast of one value per row (of a literal, with `literal`) to `rank` axes."""
        step = self.producer.get(key)
        if step is None or step.op != "broadcast_in_dim" or len(self.shape(key)) != rank:
            return False
        if literal:
            return step.ins[0] is None
        if step.ins[0] is None:
            return False
        # constant along the keys: no operand axis of more than one element lands on the last axis
        operand, axes = self.shape(step.ins[0]), list(step.params["broadcast_dimensions"])
        return all(operand[i] == 1 for i, axis in enumerate(axes) if axis == rank - 1)

    def score_region(self, e: str, score_shape: tuple[int, ...]) -> tuple[set[str], list[Step]] | None:
        """The score-sized values E is computed from elementwise, and the products making scores
        (their last axis a free axis of their right operand); None when E reads a score-sized value
        any other way."""
        region, products, todo = set(), [], [e]
        while todo:
            key = todo.pop()
            if key in region or key not in self.producer:
                continue
            step = self.producer[key]
            region.add(key)
            if self.keeps_rows(step):
                todo.append(step.ins[0])
                continue
            if step.op == "iota" or step.op == "broadcast_in_dim" and not self.score_sized(step.ins[0], score_shape):
                if self.reduces_scores(step.ins[0], score_shape):
                    return None  # a row statistic of the scores inside E needs every key first
                continue  # made from no score (a mask's positions, a literal, a row of inputs): any block of it
            if step.op == "dot_general":
                lc, rc, lb, rb = _dims(step)
                rhs_rank = len(self.shape(step.ins[1]))
                if rhs_rank - len(rc) - len(rb) < 1:
                    return None
                products.append(step)
                continue
            if step.op in _TRANSPARENT or step.op.startswith("reduce") or step.op in ("softmax", "concatenate"):
                return None  # a view or reduction of scores is not elementwise on them
            if any(self.reduces_scores(k, score_shape) for k in step.ins if not self.score_sized(k, score_shape)):
                return None  # a row statistic of the scores inside E needs every key first
            todo += [k for k in step.ins if self.score_sized(k, score_shape)]
        return (region, products) if products else None

    def reduces_scores(self, key: str | None, score_shape: tuple[int, ...]) -> bool:
        """Computed in the kernel from a reduction of score-sized values."""
        todo, seen = [key], set()
        while todo:
            step = self.producer.get(todo.pop())
            if step is None or step.out in seen:
                continue
            seen.add(step.out)
            if step.op.startswith("reduce") and self.score_sized(step.ins[0], score_shape):
                return True
            todo += step.ins
        return False

    def score_sized(self, key: str | None, score_shape: tuple[int, ...]) -> bool:
        """Holds as many elements as the scores, along the same axes in some order."""
        return key is not None and sorted(_core(self.shape(key))) == sorted(_core(score_shape))


def attentions(kernel: KernelSteps):
    """Each softmax(E(S)) @ V among the steps: (the mix, which operand is the probabilities, their
    shape, the products making the scores)."""
    for mix in kernel.steps:
        if mix.op != "dot_general":
            continue
        lc, rc, _, _ = _dims(mix)
        # the probabilities are the operand contracted along its last axis (the keys) alone
        for side, contracted in enumerate((lc, rc)):
            probabilities = mix.ins[side]
            shape = kernel.shape(probabilities)
            if probabilities not in kernel.producer or len(shape) < 2 or contracted != [len(shape) - 1]:
                continue
            e = kernel.softmax_input(kernel.unviewed(probabilities))
            found = e is not None and kernel.score_region(e, shape)
            if found:
                yield mix, side, shape, found[1]


def attention_groups(steps: list[Step], avals: dict[str, Aval]) -> list[list[int]]:
    """For each attention in a program's steps with one score product, the steps a key-blocked
    kernel of it computes: those from the score product to the mix, and the score-sized values
    they read (a mask made from positions), by index in program order."""
    kernel = KernelSteps(steps, avals)
    index = {s.out: i for i, s in enumerate(steps)}
    groups = []
    for mix, _, shape, products in attentions(kernel):
        if len(products) != 1:
            continue
        start = index[products[0].out]
        below = {products[0].out}  # values computed from the scores, up to the mix
        for step in steps[start + 1:index[mix.out] + 1]:
            if any(k in below for k in step.ins):
                below.add(step.out)
        group, todo = set(), [mix.out]
        while todo:
            key = todo.pop()
            if key in group or key not in kernel.producer:
                continue
            if key in below or kernel.score_sized(key, shape):
                group.add(key)
                todo += [k for k in kernel.producer[key].ins if k is not None]
        groups.append(sorted(index[k] for k in group))
    return groups


def key_region(steps: list[Step], avals: dict[str, Aval], written: set[str]) -> KeyRegion | None:
    """The kernel's attention when it has one whose score-sized values it need not write."""
    kernel = KernelSteps(steps, avals)
    for mix, side, shape, products in attentions(kernel):
        # every score-sized value the kernel computes is one block's tile: made elementwise, by
        # the score product, or a view of what the kernel reads (a mask broadcast over heads)
        scores = {s.out for s in steps if kernel.score_sized(s.out, shape)}
        made_otherwise = any(s.op == "concatenate" or s.op.startswith("reduce") or
                             s.op == "transpose" and not kernel.keeps_rows(s) for s in steps if s.out in scores)
        if made_otherwise or scores & written or len(products) != 1:
            continue
        return KeyRegion(tuple(sorted(scores)), products[0], mix, mix.ins[1 - side], math.prod(shape[:-2]),
                         shape[-2], shape[-1])
    return None


def _block_product(profile: HardwareProfile, step: Step, dtype: str, batch: int, m: int, n: int,
                   contracted: int) -> OpCost:
    """The product of one block: [batch, m, contracted] @ [batch, contracted, n]."""
    params = {**step.params, "dimension_numbers": [[[2], [1]], [[0], [0]]]}
    return op_cost(profile, "dot_general", params, [((batch, m, contracted), dtype), ((batch, contracted, n), dtype)],
                   ((batch, m, n), dtype))


def _scaled(cost: OpCost, times: int) -> OpCost:
    return replace(cost, time_s=cost.time_s * times, energy_j=cost.energy_j * times, flops=cost.flops * times)


def _candidates(size: int) -> list[int]:
    sizes = {size}
    block = MIN_BLOCK
    while block < size:
        sizes.add(block)
        block *= 2
    return sorted(sizes)


@dataclass(frozen=True)
class BlockedWork:
    """`fused_estimate`'s arguments for the blocked kernel, and its block sizes."""

    parts: list[OpCost]
    read_bytes: int
    intermediate_bytes: int
    tiling: dict[str, int]


def blocked_options(profile: HardwareProfile, region: KeyRegion, steps: list[Step], parts: list[OpCost],
                    avals: dict[str, Aval], read_bytes: int, intermediate_bytes: int, inputs: set[str],
                    counted: set[str], online: bool = True) -> list[BlockedWork]:
    """The blocked kernel at every query and key block size whose working set fits in SRAM
    beside the kernel's other intermediates, and in one block's share of it where the profile
    bounds that (a GPU's shared memory per SM); without `online` (no online softmax: exact, what a
    conventional compiler's tiling does) one key block of every key. `parts` are the steps' costs,
    `counted` the values `intermediate_bytes` holds, `inputs` what the kernel reads from HBM."""
    score, mix = region.score_product, region.mix_product
    dtype = avals[score.out][1]
    size = dtype_bytes(dtype)
    depth = math.prod(avals[score.ins[0]][0][d] for d in _dims(score)[0])
    values_contracted, values_batch = _dims(mix)[1::2] if region.values == mix.ins[1] else _dims(mix)[0::2]
    width = math.prod(d for i, d in enumerate(avals[region.values][0]) if i not in values_contracted + values_batch)
    others = [c for s, c in zip(steps, parts) if s is not score and s is not mix]
    # K and V as the kernel reads them from HBM, through the views that lay them out (a transpose,
    # GQA's repeat): each block lays out its own tile and makes its rows of the output, so neither
    # those views, the scores nor the output are held whole
    kernel = KernelSteps(steps, avals)
    keys, values = kernel.views_of(score.ins[1]), kernel.views_of(region.values)
    per_block = {*region.scores, *keys[:-1], *values[:-1], mix.out}
    rest = intermediate_bytes - sum(nbytes(avals[k]) for k in per_block if k in counted)
    key_reads = sum(nbytes(avals[k]) for k in {keys[-1], values[-1]} if k in inputs)
    options = []
    for bq in _candidates(region.queries):
        for bk in _candidates(region.keys) if online else [region.keys]:
            tiles = size * (bq * (depth + 2 * width + 2) + bk * (depth + width) + 2 * bq * bk)
            if rest + tiles > profile.memory.sram_bytes or tiles > (profile.memory.block_bytes or math.inf):
                continue
            nq, nk = math.ceil(region.queries / bq), math.ceil(region.keys / bk)
            blocks = nq * nk
            products = [_scaled(_block_product(profile, score, dtype, region.batch, bq, bk, depth), blocks),
                        _scaled(_block_product(profile, mix, dtype, region.batch, bq, width, bk), blocks)]
            # per key block beyond the first: the running output rescaled, its max and sum updated
            t, e, flops = vector_cost(profile, {"mul": region.batch * nq * (nk - 1) * bq * width,
                                                "exp": region.batch * nq * (nk - 1) * bq}, 0)
            rescale = OpCost("vector", t, e, flops, "vector")
            options.append(BlockedWork([*others, *products, rescale], read_bytes + (nq - 1) * key_reads,
                                       rest + tiles, {"query_block": bq, "key_block": bk, "query_blocks": nq,
                                                      "key_blocks": nk}))
    return options
