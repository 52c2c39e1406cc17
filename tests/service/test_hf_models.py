"""Hugging Face transformers models as their users call them (randomly initialised from small
configs of their own classes: nothing is downloaded): `optimize(model, **inputs)` captures the model
with its buffers as constants of the program, validates it, and `.fn` gives back what the model
does (its output dataclass, its cache) with values equal to eager."""
from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree

from bench.models.hf_zoo import build
from service.client import optimize

pytestmark = pytest.mark.slow


def _assert_equal_to_eager(got, expected):
    assert type(got) is type(expected)
    got_leaves, expected_leaves = _pytree.tree_leaves(got), _pytree.tree_leaves(expected)
    assert len(got_leaves) == len(expected_leaves)
    for g, e in zip(got_leaves, expected_leaves):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def test_an_encoders_registered_buffers_are_constants_and_its_output_dataclass_comes_back():
    model, inputs = build("bert")
    result = optimize(model, **inputs, time_limit_s=10)
    activations = [s for s in result.program["inputs"] if s["role"] == "activation"]
    # token_type_ids and position_ids are buffers: only the token ids are drawn (an out-of-table
    # token type made the check crash before)
    assert [(s["shape"], s["dtype"]) for s in activations] == [([2, 16], "int64")]
    assert result.validation["status"] in ("passed", "identical")
    with torch.no_grad():
        _assert_equal_to_eager(result.fn(**inputs), model(**inputs))
        other = {"input_ids": torch.randint(3, 512, (2, 16), generator=torch.Generator().manual_seed(1))}
        _assert_equal_to_eager(result.fn(**other), model(**other))
        _assert_equal_to_eager(result.fn(other["input_ids"]), model(other["input_ids"]))  # bound by name


def test_a_setting_the_program_fixed_is_checked_on_each_call():
    model, inputs = build("bert")
    fn = optimize(model, **inputs, return_dict=False, time_limit_s=5).fn
    with torch.no_grad():
        _assert_equal_to_eager(fn(**inputs, return_dict=False), model(**inputs, return_dict=False))
    with pytest.raises(TypeError, match="return_dict=False"):
        fn(**inputs, return_dict=True)
