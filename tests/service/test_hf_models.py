"""Hugging Face transformers models as their users call them (randomly initialised from small
configs of their own classes: nothing is downloaded), three representatives of the zoo in
bench/models/hf_zoo.py (an encoder, a decoder with its KV cache, an audio encoder with a
weight-norm convolution): through `optimize(model, **inputs)`, `torch.compile(backend="optu")` and
a real server over HTTP, each validated and giving back what the model gives back (its output
dataclass, its cache) with values equal to eager."""
from __future__ import annotations

import copy

import pytest
import torch
from torch.utils import _pytree
from transformers import DynamicCache, StaticCache

from bench.models.hf_zoo import build
from service.client import optimize
from service.optimizer.options import DEFAULT_NODE_LIMIT
from service.torch_backend import optu_backend

pytestmark = pytest.mark.slow
REPRESENTATIVES = ["bert", "gpt2", "wav2vec2"]
VERDICTS = ("passed", "identical")


def _assert_equal_to_eager(got, expected):
    assert type(got) is type(expected)
    got_leaves, expected_leaves = _pytree.tree_leaves(got), _pytree.tree_leaves(expected)
    assert len(got_leaves) == len(expected_leaves) > 0
    for g, e in zip(got_leaves, expected_leaves):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def _eager(model, inputs):
    with torch.no_grad():
        return model(**copy.deepcopy(inputs))


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_a_model_is_optimized_in_process_and_gives_back_what_it_gives(name):
    model, inputs = build(name)
    result = optimize(model, **inputs, time_limit_s=10)
    assert result.validation["status"] in VERDICTS
    assert result.response["torch_validation"]["status"] in VERDICTS
    with torch.no_grad():
        _assert_equal_to_eager(result.fn(**inputs), _eager(model, inputs))


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_a_model_compiles_with_the_optu_backend(name):
    torch._dynamo.reset()
    model, inputs = build(name)
    caches = []

    def backend(gm, example_inputs):
        caches.append(optu_backend(gm, example_inputs, options={"time_limit_s": 10}))
        return caches[-1]

    with torch.no_grad():
        _assert_equal_to_eager(torch.compile(model, backend=backend)(**inputs), _eager(model, inputs))
    torch._dynamo.reset()
    responses = [r for cache in caches for r in cache.responses.values()]
    assert responses and all(r["validation"]["status"] in VERDICTS for r in responses)


@pytest.mark.integration
@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_a_model_is_optimized_by_a_real_server_over_http(server_url, name):
    model, inputs = build(name)
    result = optimize(model, **inputs, server=server_url, time_limit_s=10)
    assert result.validation["status"] in VERDICTS
    assert result.response["torch_validation"]["status"] in VERDICTS
    with torch.no_grad():
        _assert_equal_to_eager(result.fn(**inputs), _eager(model, inputs))


def test_an_encoders_registered_buffers_are_constants_of_the_program():
    model, inputs = build("bert")
    result = optimize(model, **inputs, time_limit_s=10)
    activations = [s for s in result.program["inputs"] if s["role"] == "activation"]
    # token_type_ids and position_ids are buffers: only the token ids are drawn (an out-of-table
    # token type made the check crash before)
    assert [(s["shape"], s["dtype"]) for s in activations] == [([2, 16], "int64")]
    with torch.no_grad():
        other = {"input_ids": torch.randint(3, 512, (2, 16), generator=torch.Generator().manual_seed(1))}
        _assert_equal_to_eager(result.fn(**other), _eager(model, other))
        _assert_equal_to_eager(result.fn(other["input_ids"]), _eager(model, other))  # bound by name


DECODERS = ["gpt2", "llama"]  # learned positions and a fused QKV; rotary positions and GQA


def _decode_step(name):
    """A decoder, and the step after its prompt: the prompt's last token and its KV cache."""
    model, inputs = build(name)
    cache = _eager(model, inputs).past_key_values
    return model, {"input_ids": inputs["input_ids"][:, -1:], "past_key_values": cache, "use_cache": True}


def _next_step(out):
    """The step after the one that gave `out`, fed the cache it gave back: what a decode loop does next."""
    return {"input_ids": out.logits[:, -1:].argmax(-1), "past_key_values": out.past_key_values, "use_cache": True}


@pytest.mark.parametrize("name", DECODERS)
def test_a_decode_step_takes_and_gives_back_the_kv_cache(name):
    model, step = _decode_step(name)
    result = optimize(model, **copy.deepcopy(step), time_limit_s=10)
    assert result.validation["status"] in VERDICTS
    with torch.no_grad():
        out = result.fn(**copy.deepcopy(step))
    assert type(out.past_key_values) is type(step["past_key_values"])
    _assert_equal_to_eager(out, _eager(model, step))
    longer = _next_step(out)  # its cache one token longer than the program was optimized for
    with torch.no_grad(), pytest.raises(TypeError, match=r"past_key_values\[0\] has shape \[.*\]; the program "
                                                            r"was optimized for"):
        result.fn(**longer)
    fewer = DynamicCache()  # one layer short
    for layer, cached in enumerate(step["past_key_values"].layers[:-1]):
        fewer.update(cached.keys.clone(), cached.values.clone(), layer)
    layers = len(step["past_key_values"].layers)
    with torch.no_grad(), pytest.raises(TypeError, match=f"past_key_values holds {2 * layers - 2} tensors or values "
                                                         f"where the example held {2 * layers}"):
        result.fn(**{**step, "past_key_values": fewer})


@pytest.mark.parametrize("name", DECODERS)
def test_a_decode_step_compiled_with_the_optu_backend_gives_back_a_cache_the_next_step_takes(name):
    torch._dynamo.reset()
    model, step = _decode_step(name)
    compiled = torch.compile(model, backend=optu_backend, options={"time_limit_s": 10})
    with torch.no_grad():
        out = compiled(**copy.deepcopy(step))
        assert type(out.past_key_values) is type(step["past_key_values"])
        _assert_equal_to_eager(out, _eager(model, step))
        after = _next_step(out)  # the cache the compiled step gave back, one token longer
        assert after["past_key_values"].get_seq_length() == step["past_key_values"].get_seq_length() + 1
        _assert_equal_to_eager(compiled(**copy.deepcopy(after)), _eager(model, after))
    torch._dynamo.reset()


def test_a_setting_the_program_fixed_is_checked_on_each_call():
    model, inputs = build("bert")
    fn = optimize(model, **inputs, return_dict=False, time_limit_s=5).fn
    with torch.no_grad():
        _assert_equal_to_eager(fn(**inputs, return_dict=False), _eager(model, {**inputs, "return_dict": False}))
    with pytest.raises(TypeError, match="return_dict=False"):
        fn(**inputs, return_dict=True)


def test_a_model_that_does_not_export_is_an_error_naming_the_reason():
    from wire.torch_capture import TorchExportError

    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    with pytest.raises(TorchExportError, match="DataDependent"):
        optimize(DataDependent(), torch.randn(3), time_limit_s=5)


@pytest.mark.parametrize("name", ["gpt2", "bart"])  # a decoder; an encoder-decoder (its cross-attention cached)
def test_greedy_generate_with_a_static_cache_compiles_its_step_once_and_gives_eager_s_tokens(name):
    """The static cache is preallocated and updated in place (the program returns its new value and
    the backend writes it back), so every decode step has the same shapes: one optimization for the
    prompt, one for all 32 steps, and none when the same loop runs again."""
    torch._dynamo.reset()
    model, inputs = build(name)
    prompt = {k: v[:1, :8] for k, v in inputs.items()}
    settings = {"max_new_tokens": 32, "do_sample": False, "cache_implementation": "static",
                "output_scores": True, "return_dict_in_generate": True}
    with torch.no_grad():
        expected = model.generate(**prompt, **settings)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(optu_backend(gm, example_inputs, options={"time_limit_s": 10}))
        return graphs[-1]

    def same_as_eager(got):  # the tokens, and each step's scores, which a stale cache would move
        assert torch.equal(got.sequences, expected.sequences) and len(expected.scores) == 32
        torch.testing.assert_close(torch.stack(got.scores), torch.stack(expected.scores), rtol=1e-4, atol=1e-4)

    model.forward = torch.compile(model.forward, backend=backend)
    optimizations = lambda: sum(len(graph.compiled) for graph in graphs)
    with torch.no_grad():
        same_as_eager(model.generate(**prompt, **settings))
        assert optimizations() <= 2
    # GPT-2's step grew 2.5 million e-nodes in one pass (distributivity both ways over its sums of
    # products) before distributivity ran under back_off
    assert all(response["report"]["egraph"]["enodes"] <= 2 * DEFAULT_NODE_LIMIT
               for graph in graphs for response in graph.responses.values())
    with torch.no_grad():
        first = optimizations()
        same_as_eager(model.generate(**prompt, **settings))
    assert optimizations() == first
    torch._dynamo.reset()


def test_a_static_cache_decode_loop_over_the_optimized_step_gives_eager_s_tokens():
    """The other entry point: the step optimized once by `optimize` and called by hand at every
    position of a static cache (prefilled eagerly), its cache written back in place each call."""
    model, inputs = build("llama")
    prompt = inputs["input_ids"][:1, :8]
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=8, do_sample=False, cache_implementation="static")
        cache = StaticCache(config=model.config, max_cache_len=16)
        logits = model(prompt, past_key_values=cache, cache_position=torch.arange(8), use_cache=True).logits
        step = lambda token, at: {"input_ids": token, "past_key_values": cache,  # noqa: E731
                                  "cache_position": torch.tensor([at]), "use_cache": True}
        tokens = [logits[:, -1].argmax(-1, keepdim=True)]
        result = optimize(model, **step(tokens[0], 8), time_limit_s=10)
        assert result.validation["status"] in VERDICTS
        for at in range(8, 15):
            tokens.append(result.fn(**step(tokens[-1], at)).logits[:, -1].argmax(-1, keepdim=True))
    assert torch.equal(torch.cat([prompt, *tokens], dim=1), expected)
