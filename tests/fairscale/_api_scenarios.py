"""fairscale's API as its own test suite exercises it, through the facade, on 2 gloo ranks.

Each function holds one behaviour that fairscale's tests (v0.4.13: tests/optim/test_oss.py,
tests/nn/data_parallel/test_sharded_ddp_*.py, test_fsdp_*.py, tests/nn/wrap/test_wrap.py)
expect, written anew for CPU; it returns what the parent test asserts on.  Training results
are compared against references built by hand (plain DDP, or gradients averaged by hand).
The facade is imported inside the functions (the implementation is chosen in the worker), from
the paths fairscale's tests import from, prefix swapped (``shardcompat.fairscale.optim.oss``,
``.nn.data_parallel``, ``.nn.wrap``, ``.nn.checkpoint``); ``_scenarios`` uses the flat names.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tests._parity import DIM, STEPS, batch, build_model, loss_fn
from tests.fairscale._scenarios import _mean, _state, _train, ddp, run_cases

SGD = functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9)


def _native(obj: object) -> bool:
    """Whether the facade served ``obj`` natively (the fairscale classes derive from fairscale's)."""
    return not any(c.__module__.startswith("fairscale.") for c in type(obj).__mro__)


def _oss_sdp(model: nn.Module, **sdp_kwargs: Any) -> tuple[Any, Any]:
    from shardcompat.fairscale.nn.data_parallel import ShardedDataParallel
    from shardcompat.fairscale.optim.oss import OSS

    optimizer = OSS(model.parameters(), optim=torch.optim.SGD, lr=0.05, momentum=0.9)
    return optimizer, ShardedDataParallel(model, optimizer, **sdp_kwargs)


# -- OSS ---------------------------------------------------------------------------------------

class Permuted(nn.Module):
    """A float layer beside a frozen integer parameter it uses (fairscale's 'tripwire' model)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = build_model("mlp")
        self.order = nn.Parameter(torch.arange(DIM - 1, -1, -1), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[:, self.order]


def mixed_dtypes(rank: int) -> dict[str, Any]:
    """OSS + ShardedDataParallel over int64 and float32 parameters, against DDP."""
    runs = {}
    for name in ("ddp", "facade"):
        model = Permuted()
        if name == "ddp":
            wrapped: Any = nn.parallel.DistributedDataParallel(model)
            optimizer: Any = SGD([p for p in model.parameters() if p.requires_grad])
        else:
            optimizer, wrapped = _oss_sdp(model)
        runs[name] = {"losses": _train(wrapped, optimizer, rank, range(STEPS)), "state": _state(model)}
    return runs


def _ddp_oss(model: nn.Module, lr: float = 0.05) -> tuple[Any, Any]:
    from shardcompat.fairscale.optim.oss import OSS

    return nn.parallel.DistributedDataParallel(model), OSS(model.parameters(), lr=lr, momentum=0.9)


def oss_reload(rank: int) -> dict[str, Any]:
    """fairscale's checkpoint flow: consolidate on rank 1, send it to all, load into a fresh OSS."""
    model, optimizer = _ddp_oss(build_model("mlp"))
    twin, twin_optimizer = _ddp_oss(build_model("mlp"))
    _train(model, optimizer, rank, range(2))
    _train(twin, twin_optimizer, rank, range(2))
    optimizer.consolidate_state_dict(recipient_rank=1)
    saved = [optimizer.state_dict() if rank == 1 else None]
    dist.broadcast_object_list(saved, src=1)
    checkpoint = copy.deepcopy(saved[0])  # as read back from a file: rank 1's holds its live tensors
    before = copy.deepcopy(checkpoint)
    from shardcompat.fairscale.optim.oss import OSS

    fresh = OSS(twin.module.parameters(), lr=10.0, momentum=0.9)  # a new optimizer, junk lr
    fresh.load_state_dict(checkpoint)
    states_are_dicts = all(isinstance(s, dict) for s in fresh.state.values())
    input_untouched = repr(before) == repr(checkpoint)
    lr = fresh.param_groups[0]["lr"]
    _train(model, optimizer, rank, range(2, STEPS))
    _train(twin, fresh, rank, range(2, STEPS))
    everywhere = fresh.state_dict(all_ranks=True)
    return {"states_are_dicts": states_are_dicts, "input_untouched": input_untouched, "lr": lr,
            "native": _native(fresh),
            "uninterrupted": _state(model.module), "resumed": _state(twin.module),
            "all_ranks": {i: s["momentum_buffer"] for i, s in everywhere["state"].items()},
            "n_params": len(list(model.parameters()))}


def oss_partition(rank: int) -> dict[str, Any]:
    """fairscale's size-balanced partition: every parameter stepped by exactly one rank."""
    from shardcompat.fairscale.optim.oss import OSS

    params = [nn.Parameter(torch.rand(size, 1)) for size in [9, 7, 5, 3] * dist.get_world_size()]
    optimizer = OSS(params, lr=0.1)
    partition = optimizer.partition_parameters()
    owners = [[id(p) for group in groups for p in group["params"]] for groups in partition]
    mine = [p for group in optimizer.optim.param_groups for p in group["params"]]
    return {"sizes": [sum(int(p.numel()) for g in groups for p in g["params"]) for groups in partition],
            "covered": sorted(i for ids in owners for i in ids) == sorted(id(p) for p in params),
            "local_is_partition": [id(p) for p in mine] == owners[rank],
            # fairscale's own view of the same partition, read by its test_gradient_clipping
            # (fairscale orders each rank's list by size)
            "per_device": {str(device): [sorted(map(id, ps)) for ps in per_rank] == list(map(sorted, owners))
                           for device, per_rank in optimizer._per_device_params.items()}}


# -- ShardedDataParallel -----------------------------------------------------------------------

def manual_reduce(rank: int, accumulate: int, **sdp_kwargs: Any) -> dict[str, Any]:
    """``with model.no_sync(): backward`` for every micro-batch, then ``model.reduce()``."""
    base = build_model("mlp")
    optimizer, model = _oss_sdp(base, **sdp_kwargs)
    losses = []
    for step in range(STEPS):
        model.zero_grad()
        with model.no_sync():
            for micro in range(accumulate):
                data, target = batch("mlp", rank, step * accumulate + micro)
                loss = loss_fn("mlp", model(data), target) / accumulate
                loss.backward()
        model.reduce()
        optimizer.step()
        losses.append(_mean(loss))
    return {"losses": losses, "state": _state(base), "norms": []}


def sdp_surface(rank: int) -> dict[str, Any]:
    """Attributes forwarded to the wrapped module, DDP's attributes, fairscale's grad-of-grad error."""
    base = build_model("mlp")
    base.banana = "sweet"
    _, model = _oss_sdp(base)
    out: dict[str, Any] = {
        "banana": getattr(model, "banana", None),
        "orange": hasattr(model, "orange"),
        "ddp_attributes": all(hasattr(model, a) for a in ("is_multi_device_module", "device_type", "module")),
    }
    first = next(base.parameters())
    first.grad = torch.zeros_like(first).requires_grad_()
    try:  # fairscale checks at the first forward (and after trainability changes)
        model(torch.zeros(2, DIM))
        out["grad_of_grad"] = None
    except RuntimeError as error:
        out["grad_of_grad"] = str(error)
    base = build_model("mlp")
    _, model = _oss_sdp(base)
    data, target = batch("mlp", rank, 0)
    loss_fn("mlp", model(data), target).backward()
    model.zero_grad()  # fairscale's default keeps the gradient tensors, zeroed
    grads = [p.grad for p in base.parameters()]
    out["zeroed"] = all(g is None or not g.any() for g in grads) and any(g is not None for g in grads)
    return out


def _by_hand(model: nn.Module) -> None:
    """Plain data parallelism: average every gradient over the ranks."""
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= dist.get_world_size()


def trainability_change(rank: int) -> dict[str, Any]:
    """The first parameter starts frozen and is unfrozen after the first step (fairscale's
    ``change_train_graph``): its gradient must be averaged from then on."""
    runs = {}
    for name in ("by_hand", "facade"):
        base = build_model("mlp")
        next(base.parameters()).requires_grad = False
        if name == "facade":
            optimizer, model = _oss_sdp(base)
        else:
            model, optimizer = base, SGD(base.parameters())
        losses = []
        for step in range(STEPS):
            model.zero_grad()
            data, target = batch("mlp", rank, step)
            loss = loss_fn("mlp", model(data), target)
            loss.backward()
            if name == "by_hand":
                _by_hand(base)
            optimizer.step()
            losses.append(_mean(loss))
            next(base.parameters()).requires_grad = True
        runs[name] = {"losses": losses, "state": _state(base)}
    return runs


def sync_buffers(rank: int) -> list[float]:
    base = build_model("mlp")
    base.register_buffer("seen", torch.zeros(3))
    _, model = _oss_sdp(base, broadcast_buffers=False)
    base.seen.fill_(rank + 1.0)
    model.sync_buffers(blocking=True)
    return base.seen.tolist()


def two_optimizers(rank: int, reduce_buffer_size: int) -> dict[str, Any]:
    """Two OSS over the two halves of the parameters, one ShardedDataParallel (fairscale's
    ``test_ddp_parity_two_optim`` on CPU), against DDP with two SGDs."""
    from shardcompat.fairscale.nn.data_parallel import ShardedDataParallel
    from shardcompat.fairscale.optim.oss import OSS

    runs = {}
    for name in ("ddp", "facade"):
        base = build_model("blocks")
        params = list(base.parameters())
        half = len(params) // 2
        if name == "ddp":
            model: Any = nn.parallel.DistributedDataParallel(base)
            optimizers: list[Any] = [SGD(params[:half]), SGD(params[half:])]
        else:
            optimizers = [OSS(params[:half], optim=torch.optim.SGD, lr=0.05, momentum=0.9),
                          OSS(params[half:], optim=torch.optim.SGD, lr=0.05, momentum=0.9)]
            model = ShardedDataParallel(base, optimizers, reduce_buffer_size=reduce_buffer_size)
        losses = []
        for step in range(STEPS):
            for optimizer in optimizers:
                optimizer.zero_grad()
            data, target = batch("blocks", rank, step)
            loss = loss_fn("blocks", model(data), target)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
            losses.append(_mean(loss))
        runs[name] = {"losses": losses, "state": _state(base)}
    return runs


# -- FullyShardedDataParallel ------------------------------------------------------------------

class Nested(nn.Module):
    """A root layer, an inner FSDP unit with batch norm, a layer whose rows split unevenly."""

    def __init__(self, flatten: bool, wrap: bool = True) -> None:
        from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel

        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(DIM, 2 * DIM)
        inner = nn.Sequential(nn.Linear(2 * DIM, 7), nn.BatchNorm1d(7), nn.GELU(), nn.Linear(7, DIM))
        self.inner = FullyShardedDataParallel(inner, flatten_parameters=flatten) if wrap else inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.inp(x))


def _fsdp_nested(flatten: bool) -> tuple[Any, torch.optim.Optimizer]:
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel

    model = FullyShardedDataParallel(module=Nested(flatten), flatten_parameters=flatten)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def local_checkpoint(rank: int, flatten: bool) -> dict[str, Any]:
    """fairscale's sharded checkpoints: ``local_state_dict`` + ``local_metadata_dict`` per rank,
    ``consolidate_shard_weights`` offline, ``load_local_state_dict`` back."""
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel

    model, optimizer = _fsdp_nested(flatten)
    _train(model, optimizer, rank, range(2))
    local = {k: v.clone() for k, v in model.local_state_dict().items()}
    files: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(files, (local, model.local_metadata_dict()))
    consolidated = FullyShardedDataParallel.consolidate_shard_weights([f[0] for f in files], [f[1] for f in files])
    full = {k: v.clone() for k, v in model.state_dict().items()}
    _train(model, optimizer, rank, range(2, STEPS))
    moved = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_local_state_dict(local)
    restored = {k: v.clone() for k, v in model.state_dict().items()}
    again, _ = _fsdp_nested(flatten)  # a fresh model of the same wrapping
    again.load_local_state_dict(local)
    unwrapped = Nested(flatten, wrap=False)
    unwrapped.load_state_dict(consolidated)
    try:  # one unit's shard missing: refused (fairscale's message varies with what is missing)
        model.load_local_state_dict({k: v for k, v in local.items() if k != sorted(local)[0]})
        strict = None
    except (RuntimeError, ValueError) as error:
        strict = str(error)
    return {"local_keys": sorted(local), "consolidated": consolidated, "full": full, "moved": moved,
            "restored": restored, "fresh": dict(again.state_dict()), "unwrapped": _state(unwrapped),
            "strict": strict, "native": _native(model)}


def keyword_module(rank: int) -> dict[str, Any]:
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel

    class Local(FullyShardedDataParallel):  # type: ignore[misc, valid-type]
        """``state_dict`` is ``local_state_dict`` here, which must not recurse (fairscale's test)."""

        def __init__(self) -> None:
            super().__init__(module=nn.Linear(DIM, DIM))

        def state_dict(self, *args: Any, **kwargs: Any) -> Any:
            return self.local_state_dict(*args, **kwargs)

    return {"keys": sorted(Local().state_dict())}


def divide_factors(rank: int) -> dict[str, Any]:
    """``set_gradient_divide_factors(1, 1)`` sums the gradients instead of averaging them;
    ``gradient_predivide_factor=2`` on 2 ranks averages them in another order."""
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel

    deltas, factors = {}, {}
    for name, kwargs in (("default", {}), ("summed", {}), ("predivided", {"gradient_predivide_factor": 2.0})):
        base = build_model("mlp")
        start = _state(base)
        model = FullyShardedDataParallel(base, **kwargs)
        if name == "summed":
            model.set_gradient_divide_factors(1.0, 1.0, recursive=True)
        factors[name] = (model.gradient_predivide_factor, model.gradient_postdivide_factor)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        _train(model, optimizer, rank, range(1))
        end = model.state_dict()
        deltas[name] = {k: end[k] - start[k] for k in start}
    return {"deltas": deltas, "factors": factors}


def fsdp_surface(rank: int) -> dict[str, Any]:
    """Training states, attributes and the refusals fairscale code meets."""
    from shardcompat.fairscale.nn.data_parallel import (
        FullyShardedDataParallel,
        TrainingState,
        get_fsdp_instances,
    )

    inner = FullyShardedDataParallel(nn.Linear(DIM, DIM))
    model = FullyShardedDataParallel(nn.Sequential(inner, nn.GELU()))  # the root shards no parameter
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    _train(model, optimizer, rank, range(1))
    out: dict[str, Any] = {"idle": [m.training_state == TrainingState.IDLE for m in get_fsdp_instances(model)],
                           "instances": len(get_fsdp_instances(model)),
                           "non_empty": len(get_fsdp_instances(model, skip_empty=True))}
    model.assert_state(TrainingState.IDLE)
    try:
        model.assert_state(TrainingState.SUMMON_FULL_PARAMS)
        out["assert_state"] = None
    except ValueError as error:
        out["assert_state"] = str(error)
    with model.summon_full_params():
        out["summoned"] = inner.training_state == TrainingState.SUMMON_FULL_PARAMS
    try:
        model.reset_parameters()
        out["reset"] = None
    except RuntimeError as error:
        out["reset"] = str(error)
    out["attributes"] = {a: getattr(inner, a) for a in (
        "flatten_parameters", "reshard_after_forward", "move_params_to_cpu", "move_grads_to_cpu",
        "compute_dtype", "buffer_dtype", "fp32_reduce_scatter", "bucket_cap_mb", "world_size", "rank")}
    out["flags"] = {"mixed_precision": bool(inner.mixed_precision), "cpu_offload": bool(inner.cpu_offload)}
    return out


def wrap_overrides(rank: int) -> dict[str, Any]:
    """``enable_wrap`` defaults, a ``wrap`` override, ``config_auto_wrap_policy`` (fairscale's test_wrap)."""
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel
    from shardcompat.fairscale.nn.wrap import auto_wrap, config_auto_wrap_policy, enable_wrap, wrap

    with enable_wrap(wrapper_cls=FullyShardedDataParallel, flatten_parameters=False):
        default = wrap(nn.Linear(5, 5))
        overridden = wrap(nn.Linear(5, 5), flatten_parameters=True)
    tagged = nn.Sequential(nn.Linear(5, 5), nn.Linear(5, 5))
    tagged[1].wrapper_config = {"flatten_parameters": False}
    with enable_wrap(config_auto_wrap_policy, wrapper_cls=FullyShardedDataParallel):
        wrapped = auto_wrap(tagged)
    return {"default": (type(default).__name__, default.flatten_parameters),
            "overridden": overridden.flatten_parameters,
            "tagged": [isinstance(m, FullyShardedDataParallel) for m in wrapped],
            "tagged_flat": getattr(wrapped[1], "flatten_parameters", None)}


def checkpointed_fsdp(rank: int) -> dict[str, Any]:
    """FSDP over ``checkpoint_wrapper``-ed blocks, fairscale's recommended recipe."""
    from shardcompat.fairscale.nn.checkpoint import checkpoint_wrapper
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel

    base = build_model("blocks")
    for index, block in enumerate(base.blocks):
        base.blocks[index] = FullyShardedDataParallel(checkpoint_wrapper(block))
    model = FullyShardedDataParallel(base)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = _train(model, optimizer, rank, range(STEPS), "blocks")
    return {"losses": losses, "state": dict(model.state_dict()), "norms": []}


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(DIM, 32), nn.BatchNorm1d(32), nn.GELU(), nn.Linear(32, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def batch_norm_units(rank: int) -> dict[str, Any]:
    """``auto_wrap_bn`` puts each batch norm in its own fp32, unflattened unit; trains as DDP."""
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel, auto_wrap_bn

    runs: dict[str, Any] = {}
    for name in ("ddp", "facade"):
        base = Normed()
        if name == "ddp":
            model: Any = nn.parallel.DistributedDataParallel(base, broadcast_buffers=False)
        else:
            model = FullyShardedDataParallel(auto_wrap_bn(base))
            runs["bn_unit"] = (isinstance(base.net[1], FullyShardedDataParallel), bool(base.net[1].mixed_precision))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        losses = _train(model, optimizer, rank, range(STEPS))
        state = dict(model.state_dict()) if name == "facade" else _state(base)
        runs[name] = {"losses": losses, "state": {k: v for k, v in state.items() if "running" not in k
                                                  and "num_batches" not in k}}
    return runs


CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "mixed_dtypes": (mixed_dtypes, {}),
    "oss_reload": (oss_reload, {}),
    "oss_partition": (oss_partition, {}),
    "ddp-mlp-sgd": (ddp, {"model_name": "mlp", "optim": "sgd"}),
    "ddp-mlp-sgd-acc": (ddp, {"model_name": "mlp", "optim": "sgd", "accumulate": 2}),
    "manual_reduce": (manual_reduce, {"accumulate": 1, "reduce_buffer_size": 0}),
    "manual_reduce-acc-bucket": (manual_reduce, {"accumulate": 2}),
    "sdp_surface": (sdp_surface, {}),
    "trainability_change": (trainability_change, {}),
    "sync_buffers": (sync_buffers, {}),
    "two_optimizers-bucket": (two_optimizers, {"reduce_buffer_size": 2**20}),
    "two_optimizers-no-bucket": (two_optimizers, {"reduce_buffer_size": 0}),
    "local_checkpoint-flat": (local_checkpoint, {"flatten": True}),
    "local_checkpoint-unflat": (local_checkpoint, {"flatten": False}),
    "keyword_module": (keyword_module, {}),
    "divide_factors": (divide_factors, {}),
    "fsdp_surface": (fsdp_surface, {}),
    "wrap_overrides": (wrap_overrides, {}),
    "ddp-blocks-adam": (ddp, {"model_name": "blocks", "optim": "adam"}),
    "checkpointed_fsdp": (checkpointed_fsdp, {}),
    "batch_norm_units": (batch_norm_units, {}),
}


def run(rank: int, world_size: int, names: list[str]) -> dict[str, Any]:
    return run_cases(CASES, rank, names)
