"""An in-process request keeps its caller's heap out of the collector's sight while it runs, and
gives it back as it was; a process that froze its own heap is left alone."""
from __future__ import annotations

import gc

import jax.numpy as jnp
import numpy as np

from service import client
from service.optimizer import pipeline
from service.optimizer.caller_heap import CallerHeap
from service.optimizer.progress import listening
from wire.capture import capture

X, W = np.ones((4, 8), np.float32), np.ones((8, 8), np.float32)


def _layer(x, w):
    return jnp.tanh(x @ w) @ w


def test_the_callers_heap_is_frozen_while_the_client_optimizes_and_given_back_after():
    assert gc.get_freeze_count() == 0
    during = []
    client.optimize(_layer, X, W, progress=lambda _: during.append(gc.get_freeze_count()))
    assert during and min(during) > 0  # every stage ran with the caller's objects out of sight
    assert gc.get_freeze_count() == 0


def test_the_pipeline_called_directly_freezes_the_callers_heap_too():
    program, during = capture(_layer, X, W), []
    with listening(lambda _: during.append(gc.get_freeze_count())):
        pipeline.optimize(program)
    assert during and min(during) > 0
    assert gc.get_freeze_count() == 0


def test_a_heap_its_process_froze_stays_frozen():
    """A server's worker froze what start-up made: a request neither freezes more nor thaws it."""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        during = []
        client.optimize(_layer, X, W, progress=lambda _: during.append(gc.get_freeze_count()))
        # (the count only falls as frozen objects die; a second freeze would add the request's own)
        assert during and 0 < min(during) and max(during) <= frozen
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_nested_requests_thaw_once_the_outermost_ends():
    heap = CallerHeap()
    with heap.out_of_sight():
        outer = gc.get_freeze_count()
        # frozen objects other threads free leave the count: a second freeze would raise it, a thaw empty it
        with heap.out_of_sight():
            assert 0 < gc.get_freeze_count() <= outer
        assert 0 < gc.get_freeze_count() <= outer  # the inner one's end thaws nothing
    assert gc.get_freeze_count() == 0
