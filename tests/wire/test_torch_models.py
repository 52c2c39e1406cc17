"""Whole PyTorch models captured through torch.export run equal to PyTorch eager as wire
programs; weights become weight inputs; dtypes stay as torch declares them; a model torch.export
refuses is a clear error carrying torch.export's reason."""
from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from torch_models import eval_models

from wire.format import ConstSpec, decode_array
from wire.execute import program_to_callable, typecheck
from wire.torch_capture import TorchCaptureError, TorchExportError, capture_torch, to_numpy

pytestmark = pytest.mark.slow  # whole models through capture and the pipeline

MODELS = eval_models()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_captured_model_runs_equal_to_torch_eager(name):
    model, args = MODELS[name]
    captured = capture_torch(model, *args)
    with jax.enable_x64(True):
        typecheck(captured.program)
        got = jax.jit(program_to_callable(captured.program))(*captured.weights, *[to_numpy(a) for a in args])
    with torch.no_grad():
        expected = model(*args)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.dtype == to_numpy(e).dtype and g.shape == tuple(e.shape)
        np.testing.assert_allclose(g, to_numpy(e), rtol=1e-4, atol=1e-5)


def test_parameters_become_weight_inputs_and_buffers_constants_of_the_program():
    model, args = MODELS["conv"]
    captured = capture_torch(model, *args)
    roles = [s["role"] for s in captured.program["inputs"]]
    # conv weight+bias, bn weight+bias, fc weight+bias; the unused step counter is dropped
    assert roles == ["weight"] * 6 + ["activation"]
    held = [decode_array(ConstSpec(**c)) for c in captured.program["consts"]]
    for stat in (
        to_numpy(model.bn.running_mean),
        to_numpy(model.bn.running_var),
    ):  # the running statistics are in the program as they are in the module
        assert any(h.shape == stat.shape and np.array_equal(h, stat) for h in held)
    assert {s["dtype"] for s in captured.program["inputs"]} == {"float32"}
    np.testing.assert_array_equal(captured.weights[0], to_numpy(model.conv.weight))


def test_int64_inputs_stay_int64_in_the_wire_program():
    model, args = MODELS["lstm"]
    program = capture_torch(model, *args).program
    assert program["inputs"][-1]["dtype"] == "int64" and program["inputs"][-1]["role"] == "activation"


def test_capture_leaves_jax_x64_as_it_was():
    before = jax.config.jax_enable_x64
    capture_torch(lambda a: a.sum(dtype=torch.float64), torch.randn(3))
    assert jax.config.jax_enable_x64 == before


def test_data_dependent_control_flow_is_an_error_naming_torch_exports_reason():
    def branchy(x):
        return x * 2 if x.sum() > 0 else x - 1

    with pytest.raises(TorchExportError, match="torch.export cannot export branchy.*data-dependent"):
        capture_torch(branchy, torch.randn(4))


def test_a_training_mode_batch_norm_is_an_error_not_a_stale_program():
    model = torch.nn.BatchNorm1d(4).train()
    with pytest.raises(TorchCaptureError, match=r"updates .*running_mean.* in place.*call \.eval\(\)"):
        capture_torch(model, torch.randn(3, 4))
