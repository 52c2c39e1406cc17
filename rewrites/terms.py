"""The typed egglog term language every program is loaded into.

Params that rules reason about (dimension numbers, permutations, shapes, axes) are structural
egglog values; everything else about an equation lives in a per-request params table and is
referenced by an integer id. Rules copy those ids from the nodes they match, and strings a client
sent never have to round-trip through egglog's printer.
"""
from __future__ import annotations

import functools
import struct

from egglog import Expr, String, StringLike, Vec, f64, f64Like, function, i64, i64Like

from wire.primitives import names

# Primitives the language holds as typed unary, binary (size-1 and rank-0 operands broadcast
# implicitly) and reduce terms, from the primitive table.
UNARY_OPS, BINARY_OPS, REDUCE_OPS = names(term="unary"), names(term="binary"), names(term="reduce")


class Term(Expr):
    """One array-valued value of a program; every e-class has one shape and one dtype."""

    @classmethod
    def var(cls, index: i64Like) -> Term:
        """Program input or constant number `index` (inputs first, then consts)."""

    @classmethod
    def lit(cls, bits: i64Like, dtype: StringLike) -> Term:
        """A rank-0 literal, by the IEEE bits of its value as a double (egglog's f64 would
        identify -0.0 with 0.0, and exact mode must keep the sign of zero)."""

    @classmethod
    def flit(cls, value: f64Like, dtype: StringLike) -> Term:
        """A rank-0 literal a rule computed (constant folding); never -0.0-sensitive."""

    @classmethod
    def unary(cls, op: StringLike, x: Term, extra: i64Like) -> Term: ...

    @classmethod
    def binary(cls, op: StringLike, a: Term, b: Term, extra: i64Like) -> Term: ...

    @classmethod
    def select(cls, pred: Term, on_false: Term, on_true: Term) -> Term:
        """select_n with two cases."""

    @classmethod
    def dot(
        cls, a: Term, b: Term, lhs_contract: Vec[i64], rhs_contract: Vec[i64],
        lhs_batch: Vec[i64], rhs_batch: Vec[i64], extra: i64Like,
    ) -> Term: ...

    @classmethod
    def transpose(cls, x: Term, permutation: Vec[i64]) -> Term: ...

    @classmethod
    def reshape(cls, x: Term, new_sizes: Vec[i64], extra: i64Like) -> Term: ...

    @classmethod
    def broadcast(cls, x: Term, shape: Vec[i64], dims: Vec[i64], extra: i64Like) -> Term:
        """broadcast_in_dim."""

    @classmethod
    def reduce(cls, op: StringLike, x: Term, axes: Vec[i64], extra: i64Like) -> Term: ...

    @classmethod
    def convert(cls, x: Term, new_dtype: StringLike, extra: i64Like) -> Term:
        """convert_element_type."""

    @classmethod
    def concat(cls, parts: Vec[Term], dimension: i64Like) -> Term: ...

    @classmethod
    def slice(cls, x: Term, start: Vec[i64], limit: Vec[i64], strides: Vec[i64]) -> Term:
        """Static slice; empty strides means unit strides."""

    @classmethod
    def squeeze(cls, x: Term, dimensions: Vec[i64]) -> Term: ...

    @classmethod
    def expand_dims(cls, x: Term, dimensions: Vec[i64]) -> Term:
        """Insert size-1 axes; emitted as a reshape (JAX has no such primitive)."""

    @classmethod
    def integer_pow(cls, x: Term, y: i64Like) -> Term: ...

    @classmethod
    def conv(cls, lhs: Term, rhs: Term, rhs_out_dim: i64Like, out_feature_dim: i64Like, extra: i64Like) -> Term:
        """conv_general_dilated; all its params live in the params table, and the two feature dims
        the merge rules need are structural too."""

    # Idioms: known kernels recognized from their decompositions (rewrites/idioms.py); lowering
    # expands each back into the standard primitives of its reference implementation.
    @classmethod
    def softmax(cls, x: Term) -> Term:
        """Softmax over the last axis."""

    @classmethod
    def gelu(cls, x: Term, approximate: i64Like) -> Term:
        """GELU: 1 = tanh approximation, 0 = exact (erf)."""

    @classmethod
    def layer_norm(cls, x: Term, eps: Term) -> Term:
        """(x - mean) * rsqrt(var + eps) over the last axis (scale and shift stay separate ops)."""

    @classmethod
    def attention(cls, q: Term, kt: Term, v: Term, scale: Term) -> Term:
        """softmax(q @ kt / scale) @ v over [batch, heads, seq, dim] operands (kt: keys transposed)."""

    @classmethod
    def opaque(cls, primitive: StringLike, extra: i64Like, args: Vec[Term], index: i64Like) -> Term:
        """Output `index` of a primitive the optimizer does not model; carried through untouched."""

    @classmethod
    def kernel(cls, body: Body) -> Term:
        """One fused kernel computing this value from the values its body reads (`Body.arg`);
        the fusion rules (rewrites/fusion.py) put it in the class of the value it computes."""

    @classmethod
    def kernel_tee(cls, body: Body, tees: Vec[Body]) -> Term:
        """`kernel(body)` that also computes and writes the values of `tees` (multi-output fusion:
        other readers of those values need neither recompute nor a kernel of their own). A tee
        is an operand inside `body` or a further root of the kernel."""

    @classmethod
    def tee_out(cls, body: Body, tees: Vec[Body], index: i64Like) -> Term:
        """The value of `tees[index]` as written by `kernel_tee(body, tees)`; extraction may
        choose it only together with that kernel."""


class Body(Expr):
    """The inside of a fused kernel: a tree of ops whose leaves read materialized values.

    Each constructor takes the same arguments as the Term constructor it mirrors, with Body
    operands, plus `like`: the Term class whose value it computes (its shape and dtype). Bodies are
    never rewritten, so each Body class holds one node, and a value inlined into two kernels is
    two separate body subtrees: extraction pays for it twice (recompute).
    """

    @classmethod
    def arg(cls, x: Term) -> Body:
        """Read the materialized value `x` (an HBM buffer) into the kernel."""

    @classmethod
    def unary(cls, op: StringLike, x: Body, extra: i64Like, like: Term) -> Body: ...

    @classmethod
    def binary(cls, op: StringLike, a: Body, b: Body, extra: i64Like, like: Term) -> Body: ...

    @classmethod
    def select(cls, pred: Body, on_false: Body, on_true: Body, like: Term) -> Body: ...

    @classmethod
    def dot(cls, a: Body, b: Body, lhs_contract: Vec[i64], rhs_contract: Vec[i64], lhs_batch: Vec[i64],
            rhs_batch: Vec[i64], extra: i64Like, like: Term) -> Body: ...

    @classmethod
    def conv(cls, lhs: Body, rhs: Body, rhs_out_dim: i64Like, out_feature_dim: i64Like, extra: i64Like,
             like: Term) -> Body: ...

    @classmethod
    def transpose(cls, x: Body, permutation: Vec[i64], like: Term) -> Body: ...

    @classmethod
    def reshape(cls, x: Body, new_sizes: Vec[i64], extra: i64Like, like: Term) -> Body: ...

    @classmethod
    def broadcast(cls, x: Body, shape: Vec[i64], dims: Vec[i64], extra: i64Like, like: Term) -> Body: ...

    @classmethod
    def reduce(cls, op: StringLike, x: Body, axes: Vec[i64], extra: i64Like, like: Term) -> Body: ...

    @classmethod
    def convert(cls, x: Body, new_dtype: StringLike, extra: i64Like, like: Term) -> Body: ...

    # Slices and concatenations inside a kernel come from seeded kernels only (rewrites/kernel_seeds.py):
    # the fusion rules treat slices as views and leave concatenations (weight stacking) alone.
    @classmethod
    def slice(cls, x: Body, start: Vec[i64], limit: Vec[i64], strides: Vec[i64], like: Term) -> Body: ...

    @classmethod
    def concat(cls, parts: Vec[Body], dimension: i64Like, like: Term) -> Body: ...

    @classmethod
    def squeeze(cls, x: Body, dimensions: Vec[i64], like: Term) -> Body: ...

    @classmethod
    def expand_dims(cls, x: Body, dimensions: Vec[i64], like: Term) -> Body: ...

    @classmethod
    def integer_pow(cls, x: Body, y: i64Like, like: Term) -> Body: ...

    @classmethod
    def softmax(cls, x: Body, like: Term) -> Body: ...

    @classmethod
    def gelu(cls, x: Body, approximate: i64Like, like: Term) -> Body: ...

    @classmethod
    def layer_norm(cls, x: Body, eps: Body, like: Term) -> Body: ...


@function
def shape(x: Term) -> Vec[i64]:
    """Shape analysis; no merge function, so a union of differently shaped classes panics."""


@function
def dtype(x: Term) -> String:
    """Dtype analysis; same invariant as `shape`."""


@function(merge=lambda old, new: old)
def literal_value(x: Term) -> f64:
    """The value of a literal class, for constant folding (equal literals have equal values)."""


@function(merge=lambda old, new: old.min(new))
def slot_lo(group: StringLike, dot: Term) -> i64:
    """Merge-candidate numbering: matmuls that share their input (group "input") or their weight
    (group "weight") are numbered in program order at ingest; a merged matmul covers a range. The
    merge rules only join adjacent ranges, so n candidates make O(n^2) merges, not 2^n."""


@function(merge=lambda old, new: old.max(new))
def slot_hi(group: StringLike, dot: Term) -> i64:
    """Upper end of a matmul's merge-candidate range (see `slot_lo`)."""


@function(merge=lambda old, new: old.min(new))
def body_ops(body: Body) -> i64:
    """Ops inside a kernel body (its size guard); arguments do not count."""


@function(merge=lambda old, new: old.min(new))
def body_gemms(body: Body) -> i64:
    """GEMMs inside a kernel body: the fusion rules build bodies with at most one."""


@function
def output(index: i64Like) -> Term:
    """Marks program output `index`; lets extraction find its roots in the serialized e-graph."""


def ivec(values) -> Vec[i64]:
    """A Vec[i64] literal from Python ints."""
    return _ivec(tuple(int(v) for v in values))


@functools.lru_cache(maxsize=4096)
def _ivec(values: tuple[int, ...]) -> Vec[i64]:
    # Building one costs ~0.4 ms in egglog-python, and programs repeat a few shapes and axes many
    # times; an expression is an immutable value, so one object serves every e-graph.
    return Vec[i64](*(i64(v) for v in values))


def float_bits(value: float) -> int:
    """The bits of a double as a signed 64-bit integer (egglog's i64)."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


def bits_float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]
