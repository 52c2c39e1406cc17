"""The PyTorch models torch capture is checked on: the eight torch.nn architectures users bring
most (attention blocks, recurrent nets, a conv net, an MLP) and one using the ops models add."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPTBlock(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class LSTMLanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.lstm, self.out = nn.Embedding(50, 16), nn.LSTM(16, 24, num_layers=2, batch_first=True), \
            nn.Linear(24, 50)

    def forward(self, tokens):
        return self.out(self.lstm(self.embed(tokens))[0])


class TinyLSTM(nn.Module):
    """An Embedding into a one-layer LSTM: the recurrent case, small enough to optimize quickly."""

    def __init__(self):
        super().__init__()
        self.embed, self.lstm = nn.Embedding(20, 8), nn.LSTM(8, 8, batch_first=True)

    def forward(self, tokens):
        return self.lstm(self.embed(tokens))[0]


class GRUEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(12, 20, batch_first=True)

    def forward(self, x):
        return self.gru(x)[0]


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2), 1).flatten(1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.ln, self.l2, self.l3 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 32), nn.Linear(32, 8)

    def forward(self, x):
        return F.softmax(self.l3(F.silu(self.l2(self.ln(F.gelu(self.l1(x)))))), dim=-1)


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)[0]


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x, memory):
        return self.layer(x, memory)


class CommonOps(nn.Module):
    """Transposed conv, group norm, both interpolations, pad, avg pool, topk, sort, gather, cumsum."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)
        self.norm = nn.GroupNorm(1, 3)

    def forward(self, x, index):
        y = F.interpolate(self.norm(self.up(x)), scale_factor=2, mode="nearest")
        y = F.interpolate(y, size=(10, 12), mode="bilinear", align_corners=False)
        flat = F.avg_pool2d(F.pad(y, (1, 1, 0, 2)), 2).flatten(1)
        top, where = torch.topk(flat, 3, dim=1)
        return top + torch.sort(flat, dim=1)[0][:, :3] + torch.gather(flat, 1, index), torch.cumsum(flat, 1), where


def models() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """name -> (model in eval mode, example inputs), seeded."""
    torch.manual_seed(0)
    return {
        "encoder": (nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), (torch.randn(2, 6, 32),)),
        "decoder": (DecoderLayer(), (torch.randn(2, 5, 32), torch.randn(2, 6, 32))),
        "mha": (SelfAttention(), (torch.randn(2, 6, 32),)),
        "gpt": (GPTBlock(), (torch.randn(2, 6, 32),)),
        "lstm": (LSTMLanguageModel(), (torch.randint(0, 50, (2, 5)),)),
        "gru": (GRUEncoder(), (torch.randn(2, 5, 12),)),
        "conv": (ConvNet(), (torch.randn(2, 3, 8, 8),)),
        "mlp": (MLP(), (torch.randn(4, 16),)),
        "common": (CommonOps(), (torch.randn(2, 4, 3, 3), torch.randint(0, 30, (2, 3)))),
    }


def eval_models() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    return {name: (model.eval(), args) for name, (model, args) in models().items()}
