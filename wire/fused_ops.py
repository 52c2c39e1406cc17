"""Ops a wire program may hold beyond JAX's primitives: fused kernels of its own, each one Pallas
kernel, bound by the wire executor as it binds a primitive."""
from __future__ import annotations

import functools
from typing import Any

from wire.flash_attention import FlashAttention
from wire.tiled import Tiled


@functools.cache
def composite_ops() -> dict[str, Any]:
    """The fused ops by name."""
    return {op.name: op for op in (FlashAttention(), Tiled())}
