"""Loops written as fairscale's documentation shows them, run on every rank of one spawn.

The ``from shardcompat.fairscale import ...`` lines sit inside the functions on purpose: the
implementation is chosen on first import, in the worker, after the launcher has set the
environment (``SHARDCOMPAT_FAIRSCALE``).  The reference is plain DDP built by hand.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tests._parity import STEPS, batch, build_model, loss_fn

SGD = functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9)


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _mean(loss: torch.Tensor) -> float:
    value = loss.detach().clone()
    dist.all_reduce(value)
    return float(value) / dist.get_world_size()


def _train(model: Any, optimizer: Any, rank: int, steps: range, name: str = "mlp") -> list[float]:
    """Plain steps as fairscale's tests take them; the loss averaged over ranks, per step."""
    losses = []
    for step in steps:
        optimizer.zero_grad()
        data, target = batch(name, rank, step)
        loss = loss_fn(name, model(data), target)
        loss.backward()
        optimizer.step()
        losses.append(_mean(loss))
    return losses


def ddp(rank: int, model_name: str, optim: str, *, clip: float | None = None, accumulate: int = 1) -> dict[str, Any]:
    my_module = build_model(model_name)
    model = nn.parallel.DistributedDataParallel(my_module)
    optimizer = SGD(model.parameters()) if optim == "sgd" else torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, norms = [], []
    for step in range(STEPS):
        model.zero_grad()
        for micro in range(accumulate):
            data, target = batch(model_name, rank, step * accumulate + micro)
            ctx = model.no_sync() if micro < accumulate - 1 else nullcontext()
            with ctx:
                loss = loss_fn(model_name, model(data), target) / accumulate
                loss.backward()
        if clip is not None:
            norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), clip)))
        optimizer.step()
        losses.append(_mean(loss))
    return {"losses": losses, "state": _state(my_module), "norms": norms, "optim": optimizer.state_dict()}


def oss_sdp(rank: int, model_name: str, *, optimizer_zero_grad: bool = False, clip: float | None = None,
            reduce_buffer_size: int | None = None) -> dict[str, Any]:
    """fairscale's ShardedDDP tutorial loop (lr and data from the parity harness)."""
    from shardcompat.fairscale import OSS, ShardedDataParallel

    model = build_model(model_name)
    base = model
    optimizer = OSS(params=model.parameters(), optim=torch.optim.SGD, lr=0.05, momentum=0.9)
    extra = {} if reduce_buffer_size is None else {"reduce_buffer_size": reduce_buffer_size}
    model = ShardedDataParallel(model, optimizer, **extra)
    losses, norms = [], []
    for step in range(STEPS):
        data, target = batch(model_name, rank, step)
        if optimizer_zero_grad:
            optimizer.zero_grad()  # torch 2 sets grads to None: the fairscale #354 trap
        else:
            model.zero_grad()
        loss = loss_fn(model_name, model(data), target)
        loss.backward()
        if clip is not None:
            norms.append(float(optimizer.clip_grad_norm(clip)))
        optimizer.step()
        losses.append(_mean(loss))
    optimizer.consolidate_state_dict(recipient_rank=0)
    full = optimizer.state_dict() if rank == 0 else None
    return {"losses": losses, "state": _state(base), "norms": norms, "optim": full,
            "classes": (type(optimizer).__module__, type(model).__module__)}


def fsdp(rank: int, model_name: str, *, accumulate: int = 1, clip: float | None = None,
         **fsdp_kwargs: Any) -> dict[str, Any]:
    """fairscale's FSDP docstring loop: the optimizer is built on the *wrapped* model."""
    from shardcompat.fairscale import FullyShardedDataParallel

    my_module = build_model(model_name)
    model = FullyShardedDataParallel(my_module, **fsdp_kwargs)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, norms = [], []
    for step in range(STEPS):
        optim.zero_grad()
        for micro in range(accumulate):
            sample, label = batch(model_name, rank, step * accumulate + micro)
            ctx = model.no_sync() if micro < accumulate - 1 else nullcontext()
            with ctx:
                out = model(sample)
                loss = loss_fn(model_name, out, label) / accumulate
                loss.backward()
        if clip is not None:
            norms.append(float(model.clip_grad_norm_(clip)))
        optim.step()
        losses.append(_mean(loss))
    with model.summon_full_params():
        # fairscale before 0.4 names them through its wrappers (``_fsdp_wrapped_module._fpw_module.``)
        full_shapes = {re.sub(r"(_fsdp_wrapped_module|_fpw_module)\.", "", n): tuple(p.shape)
                       for n, p in model.named_parameters()}
    # fairscale: "optim state dict requires flatten_parameters=True"
    gathered = model.gather_full_optim_state_dict(optim) if fsdp_kwargs.get("flatten_parameters", True) else None
    return {"losses": losses, "state": dict(model.state_dict()), "norms": norms, "full_shapes": full_shapes,
            "optim_states": None if gathered is None else len(gathered["state"]),
            "fairscale": any(c.__module__.startswith("fairscale.") for c in type(model).__mro__)}


def wrapped_fsdp(rank: int) -> dict[str, Any]:
    """``enable_wrap`` + ``auto_wrap`` as fairscale's docs show, on the two-block model."""
    from shardcompat.fairscale import (
        FullyShardedDataParallel,
        auto_wrap,
        default_auto_wrap_policy,
        enable_wrap,
    )

    policy = functools.partial(default_auto_wrap_policy, min_num_params=1000)
    with enable_wrap(wrapper_cls=FullyShardedDataParallel, reshard_after_forward=True):
        my_module = auto_wrap(build_model("blocks"), auto_wrap_policy=policy)
    model = FullyShardedDataParallel(my_module)
    units = sum(isinstance(m, FullyShardedDataParallel) for m in model.modules())
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = _train(model, optim, rank, range(STEPS), "blocks")
    return {"losses": losses, "state": dict(model.state_dict()), "units": units}


def fsdp_resume(rank: int, model_name: str) -> dict[str, Any]:
    """fairscale's checkpoint flow: ``state_dict`` + ``gather_full_optim_state_dict`` after 2 steps,
    then a fresh model (other weights) loads both, the optimizer through
    ``get_shard_from_optim_state_dict``, and trains 2 more steps."""
    from shardcompat.fairscale import FullyShardedDataParallel

    def build(seed: int) -> tuple[Any, torch.optim.Optimizer]:
        model = FullyShardedDataParallel(build_model(model_name, seed))
        return model, torch.optim.Adam(model.parameters(), lr=1e-2)

    def train(model: Any, optim: torch.optim.Optimizer, steps: range) -> list[float]:
        return _train(model, optim, rank, steps, model_name)

    model, optim = build(0)
    head = train(model, optim, range(2))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    full = [model.gather_full_optim_state_dict(optim)]  # on rank 0 only, as fairscale documents
    dist.broadcast_object_list(full, src=0)  # every rank loads the checkpoint file
    tail = train(model, optim, range(2, STEPS))
    again, again_optim = build(1)
    again.load_state_dict(weights)
    again_optim.load_state_dict(again.get_shard_from_optim_state_dict(full[0]))
    return {"losses": head + tail, "resumed": head + train(again, again_optim, range(2, STEPS)),
            "state": dict(model.state_dict()), "resumed_state": dict(again.state_dict())}


INF_STEP = 1  # the fp16 loops overflow at this step, on one rank's shard


def ddp_fp16(rank: int, model_name: str) -> dict[str, Any]:
    """The reference for fp16: DDP, autocast and torch's plain ``GradScaler``.  DDP's all-reduce
    spreads an overflow to every rank, so every rank's gradients get the inf."""
    my_module = build_model(model_name)
    model = nn.parallel.DistributedDataParallel(my_module)
    scaler = torch.amp.GradScaler("cpu")
    return _fp16_loop(rank, model_name, model, SGD(model.parameters()), scaler, my_module, overflow_on=None)


def oss_sdp_fp16(rank: int, model_name: str) -> dict[str, Any]:
    """fairscale's fp16 recipe: ShardedDDP + OSS + ``ShardedGradScaler`` under autocast.

    Each rank holds only its shard's gradients, so the overflow (put into rank 0's shard) is
    seen by rank 0 alone: only a scaler that all-reduces ``found_inf`` skips the step on every
    rank, as DDP does; a plain ``GradScaler`` lets rank 1 step its shard."""
    from shardcompat.fairscale import OSS, ShardedDataParallel, ShardedGradScaler

    base = build_model(model_name)
    optimizer = OSS(params=base.parameters(), optim=torch.optim.SGD, lr=0.05, momentum=0.9)
    model = ShardedDataParallel(base, optimizer)
    return _fp16_loop(rank, model_name, model, optimizer, ShardedGradScaler(), base, overflow_on=0)


def _fp16_loop(rank: int, model_name: str, model: Any, optimizer: Any, scaler: Any, base: nn.Module,
               overflow_on: int | None) -> dict[str, Any]:
    losses, scales = [], []
    for step in range(STEPS):
        model.zero_grad()
        data, target = batch(model_name, rank, step)
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(data)
        loss = loss_fn(model_name, out, target)
        scaler.scale(loss).backward()
        if step == INF_STEP and overflow_on in (None, rank):
            held = next(p for p in base.parameters() if p.grad is not None)
            held.grad.view(-1)[0] = float("inf")  # an fp16 overflow in this rank's gradients
        scaler.step(optimizer)
        scaler.update()
        losses.append(_mean(loss))
        scales.append(float(scaler.get_scale()))
    return {"losses": losses, "state": _state(base), "scales": scales, "scaler": type(scaler).__name__, "norms": []}


class nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


SDP_CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "ddp-mlp-sgd": (ddp, {"model_name": "mlp", "optim": "sgd"}),
    "ddp-blocks-sgd": (ddp, {"model_name": "blocks", "optim": "sgd"}),
    "ddp-mlp-sgd-clip": (ddp, {"model_name": "mlp", "optim": "sgd", "clip": 0.05}),
    "sdp-mlp": (oss_sdp, {"model_name": "mlp"}),
    "sdp-blocks": (oss_sdp, {"model_name": "blocks"}),
    "sdp-mlp-optimizer-zero-grad": (oss_sdp, {"model_name": "mlp", "optimizer_zero_grad": True}),
    "sdp-blocks-no-bucket": (oss_sdp, {"model_name": "blocks", "reduce_buffer_size": 0}),
    "sdp-mlp-clip": (oss_sdp, {"model_name": "mlp", "clip": 0.05}),
    "ddp-blocks-fp16": (ddp_fp16, {"model_name": "blocks"}),
    "sdp-blocks-fp16": (oss_sdp_fp16, {"model_name": "blocks"}),
}
FSDP_CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "ddp-mlp-adam": (ddp, {"model_name": "mlp", "optim": "adam"}),
    "ddp-blocks-adam": (ddp, {"model_name": "blocks", "optim": "adam"}),
    "ddp-mlp-adam-clip": (ddp, {"model_name": "mlp", "optim": "adam", "clip": 0.05}),
    "ddp-mlp-adam-acc": (ddp, {"model_name": "mlp", "optim": "adam", "accumulate": 2}),
    "fsdp-mlp": (fsdp, {"model_name": "mlp"}),
    "fsdp-blocks": (fsdp, {"model_name": "blocks"}),
    "fsdp-blocks-zero2-unflat": (fsdp, {"model_name": "blocks", "reshard_after_forward": False,
                                        "flatten_parameters": False}),
    "fsdp-mlp-clip": (fsdp, {"model_name": "mlp", "clip": 0.05}),
    "fsdp-mlp-acc": (fsdp, {"model_name": "mlp", "accumulate": 2}),
    "wrapped-blocks": (wrapped_fsdp, {}),
    "fsdp-blocks-resume": (fsdp_resume, {"model_name": "blocks"}),
}


def run_cases(cases: dict[str, tuple[Any, dict[str, Any]]], rank: int, names: list[str]) -> dict[str, Any]:
    """Every named case on this rank; a failing case reports its error instead of a result."""
    out: dict[str, Any] = {}
    for name in names:
        fn, kwargs = cases[name]
        try:
            out[name] = fn(rank, **kwargs)
        except Exception as error:
            out[name] = f"{type(error).__name__}: {error}"
            dist.barrier()
    return out


def run(rank: int, world_size: int, names: list[str]) -> dict[str, Any]:
    return run_cases({**SDP_CASES, **FSDP_CASES}, rank, names)
