"""Hypothesis strategies for wire programs of the shapes users write: matmul chains, MLPs,
attention, RNN scans, data-dependent conds and weight-only subgraphs (work that runs once per
weight set), each captured from JAX with its weights marked where users mark them."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax import lax

from wire.capture import capture

DIMS = st.sampled_from([4, 8, 16, 64, 256])


def _arrays(seed: int, *shapes):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=s) / np.sqrt(s[0] if len(s) > 1 else 1)).astype(np.float32) for s in shapes]


@st.composite
def chains(draw):
    dims = draw(st.lists(DIMS, min_size=3, max_size=7))
    weights = draw(st.booleans())

    def fn(*ms):
        out = ms[0]
        for m in ms[1:]:
            out = out @ m
        return out

    args = _arrays(len(dims), *zip(dims, dims[1:]))
    return capture(fn, *args, weight_argnums=tuple(range(1, len(args))) if weights else ())


@st.composite
def mlps(draw):
    widths = draw(st.lists(DIMS, min_size=2, max_size=4))
    act = draw(st.sampled_from([jax.nn.relu, jnp.tanh, jax.nn.gelu]))
    batch = draw(DIMS)

    def fn(x, *params):
        for w, b in zip(params[::2], params[1::2]):
            x = act(x @ w + b)
        return x

    shapes = [(batch, widths[0])] + [s for a, b in zip(widths, widths[1:]) for s in ((a, b), (b,))]
    args = _arrays(sum(widths), *shapes)
    return capture(fn, *args, weight_argnums=tuple(range(1, len(args))))


@st.composite
def attentions(draw):
    batch, seq, heads = draw(st.sampled_from([1, 2])), draw(st.sampled_from([4, 16])), draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([8, 16]))
    hidden = heads * head_dim

    def fn(x, wq, wk, wv, wo):
        split = lambda t: t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)
        q, k, v = split(x @ wq), split(x @ wk), split(x @ wv)
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_dim)), axis=-1)
        return (att @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden) @ wo + x

    args = _arrays(seq + hidden, (batch, seq, hidden), *[(hidden, hidden)] * 4)
    return capture(fn, *args, weight_argnums=(1, 2, 3, 4))


@st.composite
def scans(draw):
    steps, batch, n_in, n_hid = draw(st.sampled_from([2, 6])), draw(DIMS), draw(DIMS), draw(DIMS)

    def fn(xs, wx, wh, b, h0):
        return lax.scan(lambda h, x: (jnp.tanh(x @ wx + h @ wh + b),) * 2, h0, xs)

    args = _arrays(steps + n_hid, (steps, batch, n_in), (n_in, n_hid), (n_hid, n_hid), (n_hid,), (batch, n_hid))
    return capture(fn, *args, weight_argnums=(1, 2, 3))


@st.composite
def conds(draw):
    """A branch chosen by data: a GEMM on one side, a cheap elementwise op on the other."""
    batch, n_in, n_out = draw(DIMS), draw(DIMS), draw(DIMS)

    def fn(x, w, flag):
        return lax.cond(flag > 0, lambda v: jnp.tanh(v @ w), lambda v: jnp.zeros((batch, n_out), v.dtype) + v.sum(), x)

    x, w = _arrays(n_in, (batch, n_in), (n_in, n_out))
    return capture(fn, x, w, np.float32(draw(st.sampled_from([-1.0, 1.0]))), weight_argnums=(1,))


@st.composite
def weight_only(draw):
    """Work on the weights alone (a low-rank update, a folded scale) beside the per-call work."""
    batch, n, rank = draw(DIMS), draw(DIMS), draw(st.sampled_from([2, 8]))
    reduce = draw(st.booleans())

    def fn(x, w, a, b, scale):
        merged = (w + a @ b) * scale
        return x + jnp.sum(merged) if reduce else x @ merged

    args = _arrays(n + rank, (batch, n), (n, n), (n, rank), (rank, n), (n,))
    return capture(fn, *args, weight_argnums=(1, 2, 3, 4))


FAMILIES = [chains, mlps, attentions, scans, conds, weight_only]
