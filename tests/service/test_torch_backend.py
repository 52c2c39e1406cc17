"""`torch.compile(model, backend="optu")`: the entry point resolves to the backend; a transformer
block and an LSTM compile and run equal to eager; each graph break's subgraph is optimized; a new
input shape is optimized afresh; gradients are refused rather than silently dropped."""
from __future__ import annotations

import pytest
import torch
from torch_models import GPTBlock, TinyLSTM

from service.torch_backend import optu_backend
from wire.torch_capture import TorchCaptureError

pytestmark = pytest.mark.slow  # whole models through capture and the pipeline

OPTIONS = {"time_limit_s": 3}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _recording_backend(caches: list):
    """optu_backend, keeping each compiled graph's signature cache so tests can see what ran."""
    def backend(gm, example_inputs):
        caches.append(optu_backend(gm, example_inputs, options=dict(OPTIONS)))
        return caches[-1]
    return backend


def test_the_entry_point_registers_the_optu_backend():
    assert "optu" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("optu") is optu_backend


def test_a_transformer_block_compiles_and_a_new_shape_is_optimized_again():
    torch.manual_seed(0)
    model, caches = GPTBlock().eval(), []
    # the second shape reaches the backend as a graph with symbolic sizes, as Dynamo does by default
    compiled = torch.compile(model, backend=_recording_backend(caches))
    with torch.no_grad():
        for shape in [(2, 6, 32), (1, 9, 32)]:
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    signatures = [key for cache in caches for key in cache.responses]
    assert len(signatures) == 2
    assert all(r["validation"]["status"] in ("passed", "identical") for c in caches for r in c.responses.values())


def test_options_reach_the_optimizer_through_torch_compile():
    model = torch.nn.Linear(8, 4).eval()
    compiled = torch.compile(model, backend="optu", options={"hardware": "no-such-profile"})
    with torch.no_grad(), pytest.raises(Exception, match="no-such-profile"):
        compiled(torch.randn(2, 8))


def test_an_lstm_compiles_and_runs_equal_to_eager():
    torch.manual_seed(0)
    model, caches = TinyLSTM().eval(), []
    tokens = torch.randint(0, 20, (2, 3))
    with torch._dynamo.config.patch(allow_rnn=True), torch.no_grad():  # Dynamo skips RNN modules otherwise
        out = torch.compile(model, backend=_recording_backend(caches))(tokens)
    torch.testing.assert_close(out, model(tokens), rtol=1e-4, atol=1e-5)
    assert caches and all(c.responses for c in caches)


def test_each_subgraph_of_a_graph_break_is_optimized():
    def two_halves(x, w):
        y = torch.tanh(x @ w)
        torch._dynamo.graph_break()
        return (y @ w.T).softmax(-1)

    caches = []
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    out = torch.compile(two_halves, backend=_recording_backend(caches))(x, w)
    torch.testing.assert_close(out, two_halves(x, w), rtol=1e-4, atol=1e-5)
    assert len(caches) == 2 and all(len(c.responses) == 1 for c in caches)


def test_calling_with_gradients_enabled_is_refused():
    model = torch.nn.Linear(8, 4)
    with pytest.raises(TorchCaptureError, match="torch.no_grad"):
        torch.compile(model, backend="optu")(torch.randn(2, 8))


class _FastPaths(torch.nn.Module):
    """torch.nn's modules written the usual way, whose inference fast paths Dynamo hands over as
    fused ops: a TransformerEncoder with a padding mask, attention without weights, a bag of words."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, activation="gelu")
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.attention = torch.nn.MultiheadAttention(32, 4, batch_first=True)
        self.bag = torch.nn.EmbeddingBag(50, 32, mode="mean")

    def forward(self, x, padding, words):
        h = self.encoder(x, src_key_padding_mask=padding)
        h = h + self.attention(h, h, h, need_weights=False)[0]
        return h + self.bag(words)[:, None, :]


def test_torch_nns_fused_inference_paths_compile_and_run_equal_to_eager():
    model, caches = _FastPaths().eval(), []
    x, words = torch.randn(2, 6, 32), torch.randint(0, 50, (2, 4))
    padding = torch.tensor([[False] * 4 + [True] * 2, [False] * 6])
    compiled = torch.compile(model, backend=_recording_backend(caches))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, padding, words), model(x, padding, words), rtol=1e-4, atol=1e-5)
    ops = {e["op"] for cache in caches for r in cache.responses.values() for e in r["program"]["eqns"]}
    assert "dot_general" in ops  # the fused ops were lowered to their GEMMs, not carried opaque
    assert all(r["validation"]["status"] in ("passed", "identical") for c in caches for r in c.responses.values())


def test_a_graph_traced_again_reuses_the_program_this_process_optimized_for_its_signature():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 13), torch.nn.ReLU(), torch.nn.Linear(13, 5)).eval()
    caches, x = [], torch.randn(3, 8)
    with torch.no_grad():
        torch.compile(model, backend=_recording_backend(caches))(x)
        torch._dynamo.reset()  # Dynamo forgets its graph: the next call traces and hands it over again
        torch.testing.assert_close(torch.compile(model, backend=_recording_backend(caches))(x), model(x),
                                   rtol=1e-4, atol=1e-5)
        torch.compile(model, backend=_recording_backend(caches))(torch.randn(4, 8))  # a new signature
    first, again, other = [r for cache in caches for r in cache.responses.values()]
    assert (first["cache"], again["cache"], other["cache"]) == ("miss", "hit", "miss")
    assert again["program"] == first["program"] and again["id"] == first["id"]
