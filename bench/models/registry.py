"""The one model registry every benchmark script uses: the small zoo (also used by the tests) and
the benchmark-scale workloads of `large.py`, each built as `(fn, args, weight_argnums)`; `build`
also knows the held-out workloads of `heldout.py`, which no benchmark iterates but the clock check."""
from __future__ import annotations

from typing import Callable

from bench.models import heldout, large, zoo
from bench.models.large import Workload
from wire.capture import capture

SMALL: tuple[str, ...] = tuple(zoo.ZOO)
LARGE: tuple[str, ...] = tuple(large.LARGE)

MODELS: dict[str, Callable[[], Workload]] = {
    **{name: (lambda name=name: (*zoo.ZOO[name](), zoo.WEIGHT_ARGNUMS[name])) for name in SMALL},
    **large.LARGE,
}
assert len(MODELS) == len(SMALL) + len(LARGE), "a large workload shadows a zoo model"

# Recurrent models and matmul chains: where reordering, merging and hoisting change the work itself.
RECURRENT: tuple[str, ...] = ("rnn_unrolled", "nasrnn", "lstm_scan", "lstm_scan_large")
CHAINS: tuple[str, ...] = ("matmul_chain", "matmul_chain_12", "matmul_chain_80")
RNN_AND_CHAINS: tuple[str, ...] = RECURRENT + CHAINS


def build(name: str) -> Workload:
    found = MODELS.get(name) or heldout.HELDOUT.get(name)
    if found is None:
        raise KeyError(f"unknown model {name!r}; known: {', '.join([*MODELS, *heldout.HELDOUT])}")
    return found()


def capture_model(name: str) -> tuple[dict, tuple]:
    """The model's wire program and its example arguments."""
    fn, args, weight_argnums = build(name)
    return capture(fn, *args, weight_argnums=weight_argnums), args
