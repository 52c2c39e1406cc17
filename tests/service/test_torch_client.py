"""`optimize` takes PyTorch: an nn.Module, a function of tensors or an ExportedProgram is captured
locally, optimized (in-process or by a real server, which gets only the wire program), and the
result's `fn` takes and returns torch tensors equal to PyTorch eager; `optu optimize` reads .pt2."""
from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn as nn
from torch_models import TinyLSTM

from service.cli import main
from service.client import optimize


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.scale = nn.Parameter(torch.rand(32) + 0.5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)) * self.scale).softmax(-1)


def _check_torch_fn(result, model, *args):
    assert result.validation["status"] in ("passed", "identical")
    got = result.fn(*args)
    assert isinstance(got, torch.Tensor)
    with torch.no_grad():
        torch.testing.assert_close(got, model(*args), rtol=1e-4, atol=1e-5)


def test_an_nn_module_is_optimized_in_process_and_fn_takes_torch_tensors():
    model, x = TwoLayer().eval(), torch.randn(4, 16)
    result = optimize(model, x, time_limit_s=5)
    assert [s["role"] for s in result.program["inputs"]].count("weight") == 5
    _check_torch_fn(result, model, x)
    _check_torch_fn(result, model, torch.randn(4, 16))  # new values, same shapes


def test_the_client_adds_its_stages_and_none_is_counted_twice():
    """Capture, the optimizer's stages, the client's own time and PyTorch's check, one after another,
    each counted once: their sum is within the call's wall time (how close, `bench/speed.py` reports
    as `stages / wall`; a loaded machine only widens the gap between them)."""
    model, x = TwoLayer().eval(), torch.randn(4, 16)
    start = time.perf_counter()
    result = optimize(model, x, time_limit_s=5)
    wall = time.perf_counter() - start
    stages = result.report["timings_s"]
    assert {"capture", "client", "validate_torch", "build", "search" if "search" in stages else "fuse"} <= set(stages)
    assert all(seconds >= 0 for seconds in stages.values())
    assert sum(stages.values()) <= wall + 1e-5  # each stage rounded to the microsecond
    assert set(result.report["background_s"]) <= {"validate"}  # beside fusion: not a stage of the sum


def test_a_function_of_tensors_keeps_its_output_structure():
    def attention_scores(q, k):
        scores = (q @ k.transpose(-1, -2)).softmax(-1)
        return {"scores": scores, "top": scores.amax(-1)}

    q, k = torch.randn(2, 5, 8), torch.randn(2, 6, 8)
    out = optimize(attention_scores, q, k, time_limit_s=5).fn(q, k)
    expected = attention_scores(q, k)
    assert set(out) == {"scores", "top"}
    for key in out:
        torch.testing.assert_close(out[key], expected[key], rtol=1e-4, atol=1e-6)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["mlp", "int64 tokens into an lstm"])
def test_a_torch_model_is_optimized_by_a_real_server_over_http(server_url, name):
    torch.manual_seed(0)
    model, x = (TwoLayer(), torch.randn(4, 16)) if name == "mlp" else (TinyLSTM(), torch.randint(0, 20, (2, 3)))
    result = optimize(model.eval(), x, server=server_url, time_limit_s=5)
    assert result.response["estimate"]["optimized"]["time_s"] <= result.response["estimate"]["baseline"]["time_s"]
    assert result.program["inputs"][-1]["dtype"] == str(x.dtype).removeprefix("torch.")  # int64 stays int64
    _check_torch_fn(result, model, x)


def test_optu_optimize_reads_a_saved_exported_program(tmp_path, capsys):
    model, x = TwoLayer().eval(), torch.randn(4, 16)
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    assert main(["optimize", str(path), "--json"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert response["validation"]["status"] in ("passed", "identical")
    assert [s["shape"] for s in response["program"]["inputs"]][-1] == [4, 16]


@pytest.mark.integration
def test_the_server_and_the_client_import_without_torch():
    import subprocess
    import sys

    code = ("import sys, service.http.app, service.optimizer.pipeline, service.client, service.cli; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


class RingCache(nn.Module):
    """A step writing its new row into a preallocated cache at a position, in place, as a static KV
    cache is updated, and reading the whole cache back."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.project = nn.Linear(8, 8)

    def forward(self, cache, row, position):
        cache.index_copy_(0, position, self.project(row))
        return cache.sum(0) * 2


def test_a_model_that_updates_its_input_in_place_gets_it_updated_by_the_optimized_program():
    model = RingCache().eval()
    cache, row, position = torch.randn(6, 8), torch.randn(1, 8), torch.tensor([2])
    result = optimize(model, cache.clone(), row, position, time_limit_s=5)
    assert result.validation["status"] in ("passed", "identical")
    assert result.response["torch_validation"]["status"] in ("passed", "identical")
    assert len(result.program["outputs"]) == 2  # the cache's new value, then the sum
    for at in (4, 0):  # other caches, rows and positions than the example's
        mine, row = torch.randn(6, 8), torch.randn(1, 8)
        before, theirs = mine.clone(), mine.clone()
        with torch.no_grad():
            got = result.fn(mine, row, torch.tensor([at]))
            eager = model(theirs, row, torch.tensor([at]))
        torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)  # written back in place
        others = [k for k in range(6) if k != at]
        assert not torch.equal(mine[at], before[at]) and torch.equal(mine[others], before[others])


def test_a_position_past_the_cache_is_an_index_error_as_in_eager_and_writes_nothing():
    """JAX's scatter drops a write out of range where torch raises: the guard raises first, through
    `optimize` and through the backend alike, and the cache stays as it was."""
    from service.torch_backend import optu_backend

    model = RingCache().eval()
    cache, row = torch.randn(6, 8), torch.randn(1, 8)
    fn = optimize(model, cache.clone(), row, torch.tensor([2]), time_limit_s=5).fn
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=optu_backend, options={"time_limit_s": 5})
    for run in (fn, compiled):
        mine = cache.clone()
        with torch.no_grad():
            run(mine, row, torch.tensor([5]))  # the last row is in range
            written = mine.clone()
            with pytest.raises(IndexError, match=r"index out of range: .*\[6, 8\] tensor along dim 0; every index "
                                                 r"must lie in \[-6, 6\)"):
                run(mine, row, torch.tensor([6]))
        assert torch.equal(mine, written)
    with pytest.raises(IndexError):
        model(cache.clone(), row, torch.tensor([6]))
    torch._dynamo.reset()


def test_a_call_with_another_shape_than_the_optimized_one_is_an_error_naming_the_argument():
    model = TwoLayer().eval()
    result = optimize(model, torch.randn(4, 16), time_limit_s=5)
    with torch.no_grad(), pytest.raises(TypeError, match=r"argument 0 has shape \[5, 16\]; the program was "
                                                            r"optimized for \[4, 16\]"):
        result.fn(torch.randn(5, 16))


def test_an_option_given_by_its_wire_name_reaches_the_optimizer_not_the_model():
    model = TwoLayer().eval()
    result = optimize(model, torch.randn(4, 16), validate=False, time_limit_s=5)
    assert result.validation["status"] == "skipped"
