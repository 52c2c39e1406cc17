"""ATen's fused ops of torch.nn modules, as the primitives they fuse: the inference fast paths of
TransformerEncoderLayer and MultiheadAttention (taken under no_grad, so torch.compile hands them
over whole) and EmbeddingBag's lookup-and-reduce."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from wire.aten import as_dtype, lowers
from wire.aten.nn import Unavailable, layer_norm
from wire.index_guard import require_in_range


def _linear(x, weight, bias):
    return jnp.matmul(x, weight.T) + bias


def _attention(q, k, v, heads: int, mask, mask_type):
    """Scaled dot-product attention of (B, L, E) projections split into `heads`; a boolean mask is
    True where a key is hidden (a row hidden everywhere gets zero weights, as torch's masked
    softmax gives), another is added to the scores. Returns (B, L, E) and the (B, H, L, S) weights."""
    (b, length, e), source = q.shape, k.shape[1]
    d = e // heads
    split = lambda t, n: t.reshape(b, n, heads, d).transpose(0, 2, 1, 3)  # noqa: E731
    scores = jnp.matmul(split(q, length), split(k, source).transpose(0, 1, 3, 2)) / as_dtype(np.sqrt(d), q.dtype)
    hidden = None
    if mask is not None:
        mask = _mask_to_scores(mask, mask_type, b, length, source)
        if np.dtype(mask.dtype) == np.bool_:
            hidden = jnp.broadcast_to(mask, scores.shape)
            scores = jnp.where(hidden, as_dtype(-np.inf, scores.dtype), scores)
        else:
            scores = scores + mask.astype(scores.dtype)
    weights = jax.nn.softmax(scores, axis=-1)
    if hidden is not None:
        weights = jnp.where(jnp.all(hidden, axis=-1, keepdims=True), jnp.zeros((), weights.dtype), weights)
    merged = jnp.matmul(weights, split(v, source)).transpose(0, 2, 1, 3).reshape(b, length, e)
    return merged, weights


def _mask_to_scores(mask, mask_type, b: int, length: int, source: int):
    """A mask as torch's fast paths take it, broadcastable to the (B, H, L, S) scores: type 0 is
    (L, S), type 1 a key-padding (B, S), type 2 (B, H, L, S) already."""
    if mask.ndim == 2 and (mask_type == 1 or (mask_type is None and mask.shape == (b, source) != (length, source))):
        return mask[:, None, None, :]
    if mask.ndim == 3:  # (B * H, L, S) or (B, L, S)
        return mask.reshape(b, -1, length, source)
    return mask


@lowers("aten._transformer_encoder_layer_fwd.default")
def _encoder_layer(out, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
                   norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                   ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    activation = (lambda h: jax.nn.gelu(h, approximate=False)) if use_gelu else jax.nn.relu

    def self_attention(x):
        q, k, v = jnp.split(_linear(x, qkv_weight, qkv_bias), 3, axis=-1)
        return _linear(_attention(q, k, v, num_heads, mask, mask_type)[0], proj_weight, proj_bias)

    def feed_forward(x):
        return _linear(activation(_linear(x, ffn_weight_1, ffn_bias_1)), ffn_weight_2, ffn_bias_2)

    def norm(x, weight, bias):
        return layer_norm(x, 1, weight, bias, eps)[0]

    x = src
    if norm_first:
        x = x + self_attention(norm(x, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(x + self_attention(x), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


@lowers("aten._native_multi_head_attention.default")
def _multi_head_attention(out, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                          proj_bias, mask=None, need_weights=True, average_attn_weights=True, mask_type=None):
    w_q, w_k, w_v = jnp.split(qkv_weight, 3, axis=0)
    b_q, b_k, b_v = jnp.split(qkv_bias, 3, axis=0)
    batched = query.ndim == 3
    q, k, v = ((t if batched else t[None]) for t in (query, key, value))
    merged, weights = _attention(_linear(q, w_q, b_q), _linear(k, w_k, b_k), _linear(v, w_v, b_v), num_head,
                                 mask, mask_type)
    result = _linear(merged, proj_weight, proj_bias)
    if need_weights and average_attn_weights:
        weights = jnp.mean(weights, axis=1)
    result, weights = (result, weights) if batched else (result[0], weights[0])
    return [result, weights.reshape(out.all[1][0]) if need_weights else jnp.zeros(out.all[1][0], out.all[1][1])]


@lowers("aten._embedding_bag.default", "aten._embedding_bag_forward_only.default")
def _embedding_bag(out, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    # bag b holds indices[offsets[b]:offsets[b + 1]]: a (bags x indices) membership matrix makes
    # the sum one GEMM, and a padding index belongs to no bag
    bags, n = out.shape[0], indices.shape[0]
    position = jnp.arange(n, dtype=offsets.dtype)
    bag_of = jnp.sum(position[:, None] >= offsets[None, :], axis=1) - 1
    member = bag_of[None, :] == jnp.arange(bags, dtype=bag_of.dtype)[:, None]
    if padding_idx is not None and padding_idx >= 0:
        member = member & (indices != padding_idx)[None, :]
    require_in_range(indices, weight.shape[0], negative=False, what=f"reads rows of a {list(weight.shape)} table")
    rows = jnp.take(weight, indices, axis=0, mode="clip")
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None]
    counts = jnp.sum(member, axis=1).astype(weight.dtype)[:, None]
    if mode == 2:  # max; an empty bag is zeros
        picked = jnp.where(member[:, :, None], rows[None], as_dtype(-np.inf, weight.dtype))
        result = jnp.where(counts > 0, jnp.max(picked, axis=1), jnp.zeros((), weight.dtype))
    else:
        result = jnp.matmul(member.astype(weight.dtype), rows)
        if mode == 1:  # mean; an empty bag is zeros
            result = result / jnp.maximum(counts, jnp.ones((), weight.dtype))
    return [result] + [Unavailable(f"output {k} of {out.name} (its bookkeeping for gradients)") for k in (1, 2, 3)]
