"""Generated training data: different on every rank, identical in every run and on every backend.

Each batch comes from its own generator seeded by ``(seed, rank, step)``, never from the
global RNG, so a backend that draws random numbers (or a different launcher) cannot shift
the data.  The language is arithmetic progressions modulo the vocabulary: after two tokens
every next token is determined, and with strides of 1 to 3 even bigram statistics help, so
the loss visibly falls within twenty steps.
"""

from __future__ import annotations

import hashlib

import torch
from torch.nn import functional as F

from .models import ModelConfig

__all__ = ["batch", "generator", "loss"]


def generator(seed: int, rank: int, step: int) -> torch.Generator:
    """A CPU generator for one (seed, rank, step), with no collisions between them."""
    digest = hashlib.blake2b(f"{seed}/{rank}/{step}".encode(), digest_size=7).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little"))


def batch(config: ModelConfig, size: int, seed: int, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of ``rank``'s batch at ``step`` (on CPU)."""
    gen = generator(seed, rank, step)
    if config.kind == "mlp":
        x = torch.randn(size, config.dim, generator=gen)
        return x, torch.tanh(x).roll(1, dims=1)
    start = torch.randint(0, config.vocab, (size, 1), generator=gen)
    stride = torch.randint(1, 4, (size, 1), generator=gen)
    tokens = (start + stride * torch.arange(config.seq_len + 1)) % config.vocab
    return tokens[:, :-1], tokens[:, 1:]


def loss(config: ModelConfig, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy for the GPT, mean squared error for the MLP (in fp32 either way)."""
    if config.kind == "mlp":
        return F.mse_loss(output.float(), target)
    return F.cross_entropy(output.reshape(-1, config.vocab).float(), target.reshape(-1))
