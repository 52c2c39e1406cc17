"""Index bounds eager PyTorch checks on each call: capture states each index read whose values come
from the call as one flag of a guard program, apart from the model's program; an index decided at
capture (from constants) states nothing."""
from __future__ import annotations

import jax
import pytest
import torch

from wire.execute import program_to_callable
from wire.torch_capture import capture_torch, to_numpy

TABLE = torch.nn.Embedding(10, 4)


def _flags(captured, *args):
    with jax.enable_x64(True):
        run = program_to_callable(captured.guard.program)
        return [bool(f) for f in run(*captured.weights, *map(to_numpy, args))]


def _eager_raises(model, *args) -> bool:
    try:
        with torch.no_grad():
            model(*args)
    except (IndexError, RuntimeError):
        return True
    return False


CASES = {  # a model reading its input `at` as an index, and one index in and one out of its range
    "embedding": (lambda x, at: TABLE(at) * x, [3], [10]),
    "embedding negative": (lambda x, at: TABLE(at) * x, [9], [-1]),
    "index_select": (lambda x, at: torch.index_select(x, 0, at), [3], [4]),
    "advanced index": (lambda x, at: x[at] + 1, [-4], [-5]),
    "advanced index, second dim": (lambda x, at: x[:, at] * 2, [3], [4]),
    "gather": (lambda x, at: torch.gather(x, 0, at[None].expand(1, 4)), [0], [-1]),
    "index_put": (lambda x, at: x.index_put((at,), torch.ones(4)), [-1], [4]),
}


@pytest.mark.parametrize("name", CASES)
def test_an_index_from_the_call_is_checked_by_the_guard_as_eager_checks_it(name):
    model, inside, outside = CASES[name]
    x = torch.randn(4, 4)
    captured = capture_torch(model, x, torch.tensor(inside))
    assert captured.guard is not None and len(captured.guard.checks) == 1
    assert "FX node" in captured.guard.checks[0] and "every index must lie in" in captured.guard.checks[0]
    assert _flags(captured, x, torch.tensor(inside)) == [False]
    assert _flags(captured, x, torch.tensor(outside)) == [True]
    assert not _eager_raises(model, x, torch.tensor(inside)) and _eager_raises(model, x, torch.tensor(outside))
    # the flag's work is the guard's alone: the model's program computes what the model returns
    assert len(captured.program["outputs"]) == 1
    assert not {"reduce_or", "or"} & {e["op"] for e in captured.program["eqns"]}


def test_an_index_made_from_constants_is_decided_at_capture_and_adds_no_guard():
    model = lambda x: TABLE(torch.arange(3)) * x[:3]  # noqa: E731
    assert capture_torch(model, torch.randn(4, 4)).guard is None


def test_every_index_read_of_a_call_is_a_flag_of_its_own():
    model = lambda ids, rows: TABLE(ids).sum() + torch.index_select(TABLE.weight, 0, rows).sum()  # noqa: E731
    ids, rows = torch.tensor([[1, 2]]), torch.tensor([0, 9])
    captured = capture_torch(model, ids, rows)
    assert _flags(captured, ids, rows) == [False, False]
    assert _flags(captured, ids, torch.tensor([0, 10])) == [False, True]
    assert _flags(captured, torch.tensor([[10, 2]]), rows) == [True, False]
