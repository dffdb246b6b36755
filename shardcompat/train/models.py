"""The small models ``shardcompat train`` trains: a GPT-style language model and an MLP.

They are bundled so the main job needs no downloads, and sized by options so the memory
benchmark can choose shapes that shard evenly.  ``GPT`` declares ``_no_split_modules`` the
way Hugging Face models do, so ``auto_wrap`` wraps one ``GPTBlock`` per sharded unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["GPT", "MLP", "GPTBlock", "ModelConfig", "build_model", "count_parameters"]


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the bundled models (``dim`` is the MLP's width too)."""

    kind: str = "gpt"  # "gpt" or "mlp"
    layers: int = 2
    dim: int = 64
    heads: int = 4
    vocab: int = 64
    seq_len: int = 32


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"--dim {dim} must be a multiple of the number of heads ({heads})")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).unbind(2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        projected: torch.Tensor = self.proj(out.transpose(1, 2).reshape(batch, seq, dim))
        return projected


class GPTBlock(nn.Module):
    """A pre-norm transformer block: causal self-attention, then an MLP, each residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and an LM head."""

    _no_split_modules: ClassVar[list[str]] = ["GPTBlock"]

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab, config.dim)
        self.pos = nn.Embedding(config.seq_len, config.dim)
        self.blocks = nn.Sequential(*(GPTBlock(config.dim, config.heads) for _ in range(config.layers)))
        self.ln = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        logits: torch.Tensor = self.head(self.ln(self.blocks(x)))
        return logits


class MLP(nn.Module):
    """``layers`` hidden layers of width ``4 * dim``: the cheapest model to shard."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        width = 4 * config.dim
        layers: list[nn.Module] = [nn.Linear(config.dim, width), nn.GELU()]
        for _ in range(config.layers - 1):
            layers += [nn.Linear(width, width), nn.GELU()]
        layers.append(nn.Linear(width, config.dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def build_model(config: ModelConfig, seed: int) -> nn.Module:
    """The model of ``config``, initialised from ``seed`` alone: identical on every rank."""
    torch.manual_seed(seed)
    if config.kind == "gpt":
        return GPT(config)
    if config.kind == "mlp":
        return MLP(config)
    raise ValueError(f"unknown model {config.kind!r}; choose gpt or mlp")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
