"""Hand-written alternatives to the chain and RNN workloads: what a performance engineer would try
by hand under `jax.jit`, each a plain JAX function of the model's own arguments."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax.numpy as jnp
from jax import lax

from bench.models.large import nas_cell
from bench.models.zoo import lstm_update
from bench.models.registry import build
from rewrites.chain_order import Order, cheapest_order

Alternatives = dict[str, Callable[..., Any]]


def _multiply(ms: Sequence[Any], order: Order) -> Any:
    if isinstance(order, int):
        return ms[order]
    left, right = order
    return _multiply(ms, left) @ _multiply(ms, right)


def flop_optimal_chain(args: Sequence[Any]) -> Callable[..., Any]:
    """The chain multiplied in its fewest-flop parenthesisation (matrix-chain DP, price m*k*n)."""
    dims = (args[0].shape[0], *(m.shape[1] for m in args))
    _, order = cheapest_order(dims, lambda m, k, n: m * k * n)
    return lambda *ms: _multiply(ms, order)


def _tanh_rnn_hoisted(xs, w_x, w_h, b):
    # All steps' input projections in one GEMM (steps * batch rows per weight load); h starts at
    # zero, so the first step has no `h @ w_h`.
    steps, batch, n_in = xs.shape
    xw = (xs.reshape(steps * batch, n_in) @ w_x + b).reshape(steps, batch, -1)
    h = jnp.tanh(xw[0])
    for t in range(1, steps):
        h = jnp.tanh(xw[t] + h @ w_h)
    return h


def _tanh_rnn_concat(xs, w_x, w_h, b):
    # x @ w_x + h @ w_h as one GEMM over concat(x, h) and the stacked weights.
    w = jnp.concatenate([w_x, w_h])
    h = jnp.tanh(xs[0] @ w_x + b)
    for t in range(1, xs.shape[0]):
        h = jnp.tanh(jnp.concatenate([xs[t], h], axis=1) @ w + b)
    return h


def _nasrnn_hoisted(xs, wx, wh):
    steps, batch, hidden = xs.shape
    xw = (xs.reshape(steps * batch, hidden) @ wx).reshape(steps, batch, -1)
    h = nas_cell(xw[0])
    for t in range(1, steps):
        h = nas_cell(xw[t] + h @ wh)
    return h


def _nasrnn_concat(xs, wx, wh):
    w = jnp.concatenate([wx, wh])
    h = nas_cell(xs[0] @ wx)
    for t in range(1, xs.shape[0]):
        h = nas_cell(jnp.concatenate([xs[t], h], axis=1) @ w)
    return h


def _lstm_scan(projected, step, batch, n_hid):
    def cell(carry, x):
        h, c = carry
        h, c = lstm_update(step(x, h), c)
        return (h, c), h

    zeros = jnp.zeros((batch, n_hid), jnp.float32)
    (h, c), hs = lax.scan(cell, (zeros, zeros), projected)
    return hs, h, c


def _lstm_hoisted(xs, w_x, w_h, b):
    # The scan keeps its first step's zero `h @ w_h`: peeling it off costs a copy of `hs`.
    steps, batch, n_in = xs.shape
    xw = (xs.reshape(steps * batch, n_in) @ w_x + b).reshape(steps, batch, -1)
    return _lstm_scan(xw, lambda x, h: x + h @ w_h, batch, w_h.shape[0])


def _lstm_concat(xs, w_x, w_h, b):
    w = jnp.concatenate([w_x, w_h])
    return _lstm_scan(xs, lambda x, h: jnp.concatenate([x, h], axis=1) @ w + b, xs.shape[1], w_h.shape[0])


# Every gate of these cells already comes from one weight per input (w_x holds all gates), so
# there is no same-input merge left to write by hand.
_RNN: dict[str, Alternatives] = {
    "rnn_unrolled": {"hoisted": _tanh_rnn_hoisted, "concat": _tanh_rnn_concat},
    "nasrnn": {"hoisted": _nasrnn_hoisted, "concat": _nasrnn_concat},
    "lstm_scan": {"hoisted": _lstm_hoisted, "concat": _lstm_concat},
    "lstm_scan_large": {"hoisted": _lstm_hoisted, "concat": _lstm_concat},
}
_CHAINS = ("matmul_chain", "matmul_chain_12", "matmul_chain_80")
MODELS_WITH_ALTERNATIVES: tuple[str, ...] = (*_RNN, *_CHAINS)

LABELS = {"as_written": "as written", "flop_optimal": "flop-optimal order", "hoisted": "x@W_x hoisted",
          "concat": "concat(x,h)@W"}


def alternatives(name: str, fn: Callable[..., Any] | None = None, args: Sequence[Any] | None = None) -> Alternatives:
    """`{"as_written": fn, ...}`: the model as written and its hand-written alternatives, each
    taking the model's arguments (`fn` and `args` default to the registry's)."""
    if fn is None or args is None:
        fn, args, _ = build(name)
    if name in _CHAINS:
        return {"as_written": fn, "flop_optimal": flop_optimal_chain(args)}
    if name in _RNN:
        return {"as_written": fn, **_RNN[name]}
    raise KeyError(f"no hand-written alternatives for {name!r}; known: {', '.join(MODELS_WITH_ALTERNATIVES)}")
