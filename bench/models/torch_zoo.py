"""The torch zoo the torch bench runs: small PyTorch models of common shapes (a patch-embedding
transformer block, a residual MLP with BatchNorm, a dilated temporal conv net, a tiny U-Net)."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchTransformer(nn.Module):
    """Conv patch embedding, then one pre-norm attention + MLP block, then a mean-pooled head."""

    def __init__(self, dim: int = 64, heads: int = 4, patch: int = 4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.up, self.down, self.head = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim), nn.Linear(dim, 10)

    def forward(self, images):
        x = self.embed(images).flatten(2).transpose(1, 2)
        b, t, d = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        x = x + self.down(F.gelu(self.up(self.norm2(x))))
        return self.head(x.mean(1))


class ResidualMLP(nn.Module):
    def __init__(self, dim: int = 128, depth: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.SiLU())
                                    for _ in range(depth))
        self.out = nn.Linear(dim, 16)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.out(x).log_softmax(-1)


class TemporalConvNet(nn.Module):
    def __init__(self, channels: int = 32):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(channels, channels, 3, padding=d, dilation=d) for d in (1, 2, 4))
        self.norm = nn.GroupNorm(4, channels)

    def forward(self, x):
        for conv in self.convs:
            x = x + F.gelu(self.norm(conv(x)))
        return x


class TinyUNet(nn.Module):
    def __init__(self, c: int = 16):
        super().__init__()
        self.enc, self.mid, self.dec = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1), \
            nn.Conv2d(2 * c, 3, 3, padding=1)

    def forward(self, x):
        skip = F.relu(self.enc(x))
        low = F.relu(self.mid(F.avg_pool2d(skip, 2)))
        return self.dec(torch.cat([skip, F.interpolate(low, scale_factor=2, mode="nearest")], 1))


ZOO: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...]]]] = {
    "patch_transformer": lambda: (PatchTransformer(), (torch.randn(4, 3, 32, 32),)),
    "residual_mlp": lambda: (ResidualMLP(), (torch.randn(64, 128),)),
    "temporal_convnet": lambda: (TemporalConvNet(), (torch.randn(8, 32, 64),)),
    "tiny_unet": lambda: (TinyUNet(), (torch.randn(2, 3, 32, 32),)),
}


def build(name: str) -> tuple[nn.Module, tuple[Any, ...]]:
    """The named model in eval mode with its example inputs (seeded)."""
    torch.manual_seed(0)
    model, args = ZOO[name]()
    return model.eval(), args
