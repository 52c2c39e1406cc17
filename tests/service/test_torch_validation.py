"""Validation against PyTorch itself: the exported graph run by PyTorch in float64 is the reference
for the optimized program, under translation validation's verdict rules; a mutant fails."""
from __future__ import annotations

import copy

import pytest
import torch
from torch_models import eval_models

from bench.models.hf_zoo import build

from service.client import optimize, optimize_program
from service.torch_client import capture, validate_against_torch

pytestmark = pytest.mark.slow  # whole models through capture and the pipeline

MODELS = eval_models()


@pytest.mark.parametrize("name", ["mlp", "mha"])
def test_an_optimized_model_passes_against_pytorch_and_a_mutant_fails(name):
    model, args = MODELS[name]
    captured = capture(model, args)
    optimized = optimize_program(captured.program, options={"time_limit_s": 3})["program"]
    verdict = validate_against_torch(captured, optimized)
    assert verdict["status"] == "passed" and verdict["criterion"] == "torch float64"
    assert 0 < verdict["max_rel_error"] < 1e-6  # PyTorch's float64 differs from the capture's constants in float32
    mutant = copy.deepcopy(optimized)
    last_add = [e for e in mutant["eqns"] if e["op"] == "add"][-1]  # the residual or the output bias
    last_add["op"] = "sub"
    assert validate_against_torch(captured, mutant)["status"] == "failed"


def test_the_client_reports_the_verdict_against_pytorch():
    model, args = MODELS["mlp"]
    result = optimize(model, *args, time_limit_s=3)
    assert result.response["torch_validation"]["status"] == "passed"


def test_the_reference_is_pytorch_in_float64():
    model, args = MODELS["mlp"]
    captured = capture(model, args)
    inputs = [w.astype("float64") for w in captured.weights] + [args[0].double().numpy()]
    with torch.no_grad():
        expected = copy.deepcopy(model).double()(args[0].double())
    torch.testing.assert_close(torch.from_numpy(captured.reference(*inputs)[0]), expected, rtol=1e-12, atol=1e-14)


def _scaled_output(program, factor):
    """`program` with its first output multiplied by `factor` (a wrong program within the tolerance)."""
    mutant = copy.deepcopy(program)
    name = mutant["outputs"][0]
    spec = next(o for e in mutant["eqns"] for o in e["out"] if o["name"] == name)
    mutant["eqns"].append({"op": "mul", "in": [name, {"lit": factor, "dtype": spec["dtype"]}],
                           "out": [{**spec, "name": "scaled"}], "params": {}})
    mutant["outputs"][0] = "scaled"
    return mutant


def test_what_two_frameworks_round_apart_is_allowed_and_a_wrong_program_within_the_tolerance_fails():
    # a ViT's float64 run in PyTorch and in XLA differ by ~3e-9: the optimized program strayed a
    # little farther than the captured one (it was refused), which the captured one's own rounding
    # explains; a program 1e-6 off is still failed, far inside the float32 tolerance
    model, inputs = build("deit")
    captured = capture(model, (), inputs)
    optimized = optimize_program(captured.program, options={"time_limit_s": 5})["program"]
    verdict = validate_against_torch(captured, optimized)
    assert verdict["status"] == "passed", verdict["reason"]
    assert all(d["threshold"] < 1e-6 for d in verdict["draws"])
    wrong = validate_against_torch(captured, _scaled_output(optimized, 1 + 2**-20))
    assert wrong["status"] == "failed", wrong["reason"]


def test_a_scalar_buffer_keeps_its_shape_in_the_pytorch_reference():
    # a sliding-window cache returns its window size as a 0-d tensor: the reference once read it 1-d
    class WithScalarBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("window", torch.tensor(8))

        def forward(self, x):
            return x * 2, self.window.clone()

    model, x = WithScalarBuffer().eval(), torch.randn(3, 4)
    result = optimize(model, x, time_limit_s=3)
    assert result.response["torch_validation"]["status"] in ("passed", "identical")
    doubled, window = result.fn(x)
    assert window.shape == () and int(window) == 8
    torch.testing.assert_close(doubled, x * 2)
