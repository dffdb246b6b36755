"""Real fp16 loss scaling through ``Prepared``: gradients unscaled once a step, an overflow skipped
on every rank, as torch's ``GradScaler`` does on DDP.

2 gloo ranks, fp16 on CPU (autocast or FSDP's fp16 parameters), the BlockModel, fused AdamW
(the Transformers Trainer's default optimizer).  At INF_STEP an fp16 overflow happens on rank 0
only: in its loss for DDP+ZeRO (DDP's all-reduce spreads it, as a real overflow in backward
is spread), in its own gradient shard for FSDP (only a scaler that all-reduces ``found_inf``
skips the step on rank 1 too).  Each step asks for unscaled gradients twice, as the Trainer
does (clipping, then the logged norm): the scaler must divide them once.  The reference is
hand-built DDP with autocast and ``torch.amp.GradScaler``, the same overflow and clipping.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from shardcompat.launch import spawn
from tests._parity import batch as make_batch
from tests._parity import build_model, loss_fn

STEPS = 5
INF_STEP = 2
FP16_TOL = 1e-2  # relative, losses
CLIP = 1.0
FUSED = True  # the Trainer default; its skip on DTensors is the scaler's (backends/_scaler.py)
OPTIONS = {"torch-zero": "zero_dp_1 mixed_precision=fp16", "torch-fsdp1": "zero_dp_2 mixed_precision=fp16",
           "torch-fsdp2": "zero_dp_3 auto_wrap mixed_precision=fp16"}


def _adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2, fused=FUSED)


def _mean(value: torch.Tensor) -> float:
    value = value.detach().float().clone()
    dist.all_reduce(value)
    return float(value) / dist.get_world_size()


def _reference(rank: int) -> dict[str, Any]:
    module = build_model("blocks")
    model = nn.parallel.DistributedDataParallel(module)
    optimizer, scaler = _adamw(model.parameters()), torch.amp.GradScaler("cpu")
    losses, scales = [], []
    for step in range(STEPS):
        x, y = make_batch("blocks", rank, step)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = loss_fn("blocks", model(x), y)
        overflow = float("inf") if step == INF_STEP and rank == 0 else 1.0
        scaler.scale(loss * overflow).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        losses.append(_mean(loss))
        scales.append(float(scaler.get_scale()))
    return {"losses": losses, "scales": scales, "unscales": [1] * STEPS}


def _sharded(rank: int, backend: str) -> dict[str, Any]:
    import shardcompat

    prepared = shardcompat.prepare(build_model("blocks"), _adamw, OPTIONS[backend], backend=backend)
    scaler = prepared.scaler
    inner, seen = scaler._unscale_grads_, {"n": 0}

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen["n"] += 1
        return inner(*args, **kwargs)

    scaler._unscale_grads_ = counted
    losses, scales, unscales = [], [], []
    for step in range(STEPS):
        x, y = make_batch("blocks", rank, step)
        loss = loss_fn("blocks", prepared(x), y)
        prepared.backward(loss)
        # torch-zero too: its gradients are reduce-scattered to their owners, so each rank
        # sees only its own; the skip must still happen on every rank.
        if step == INF_STEP and rank == 0:
            grad = next(p.grad for p in prepared.model.parameters() if p.grad is not None)
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            local.view(-1)[0] = float("inf")  # an fp16 overflow in this rank's shard only
        prepared.clip_grad_norm_(CLIP)
        prepared.unscale_()  # a second request in the same step (the Trainer's logged norm)
        prepared.step()
        prepared.zero_grad()
        losses.append(_mean(loss))
        scales.append(float(scaler.get_scale()))
        unscales.append(seen["n"])
        seen["n"] = 0
    return {"losses": losses, "scales": scales, "unscales": unscales, "scaler": type(scaler).__name__}


def _job(rank: int, world: int, backends: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"ddp": _reference(rank)}
    for backend in backends:
        try:
            out[backend] = _sharded(rank, backend)
        except Exception as error:  # reported per backend
            out[backend] = f"{type(error).__name__}: {error}"
            dist.barrier()
    return out


@functools.cache
def _results() -> list[dict[str, Any]]:
    return spawn(_job, 2, (list(OPTIONS),), timeout=280, collective_timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", list(OPTIONS))
def test_fp16_scaling_matches_ddp_with_torchs_grad_scaler(backend: str) -> None:
    for rank, results in enumerate(_results()):
        got, want = results[backend], results["ddp"]
        assert isinstance(got, dict), f"rank {rank}: {got}"
        assert got["unscales"] == [1] * STEPS, got["unscales"]  # 2: divided twice (or torch's error)
        assert got["scales"] == want["scales"], (got["scales"], want["scales"])  # the skip, on every rank
        assert want["scales"][INF_STEP] == want["scales"][INF_STEP - 1] / 2, "no skip: the test would prove nothing"
        relative = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], want["losses"]))
        assert relative <= FP16_TOL, (got["losses"], want["losses"])
