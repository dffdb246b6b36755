"""What the mirrored modules serve beyond the classes, in the style of fairscale's own tests.

Each test imports from the fairscale path it exercises (with the prefix swapped) and runs under
whichever backing the probes choose here: real fairscale in a venv that has it, native torch
otherwise.  ``nn.checkpoint.checkpoint_activations.disable_checkpointing`` (forwards counted,
gradients compared), ``nn.wrap.auto_wrap.ConfigAutoWrap`` (the context state code reads, and
its ``recursive_wrap``), ``utils.torch_version``; and on 2 gloo ranks: ``ShardedDataParallel``'s
``broadcast_buffers`` without deprecation warnings from shardcompat, and
``FullyShardedDataParallel(flatten_parameters=False)`` with padded shards against DDP.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from packaging import version
from torch import nn

from shardcompat.launch import spawn
from tests._parity import FP32_TOL, max_diff

PACKAGE_DIR = str(Path(__file__).parents[2] / "shardcompat")


class Counted(nn.Module):
    """Two layers and a count of the forwards that really run (a recomputation is one more)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        self.calls = 0
        self.net[0].register_forward_hook(self._count)

    def _count(self, *args: Any) -> None:
        self.calls += 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_disable_checkpointing_keeps_activations_and_the_same_gradients() -> None:
    from shardcompat.fairscale.nn.checkpoint.checkpoint_activations import checkpoint_wrapper

    try:
        from shardcompat.fairscale.nn.checkpoint.checkpoint_activations import disable_checkpointing
    except ImportError as error:  # the fairscale serving checkpoint_wrapper here predates it
        pytest.skip(str(error))

    plain = Counted()
    want = _grads(plain)
    checkpointed = checkpoint_wrapper(Counted())
    assert _grads(checkpointed).keys() == want.keys()
    assert checkpointed.calls == 2, "checkpoint_wrapper should recompute the forward in backward"
    disabled = checkpoint_wrapper(Counted())
    with disable_checkpointing():
        got = _grads(disabled)
    assert disabled.calls == 1, "within disable_checkpointing the forward must not be recomputed"
    assert all(torch.allclose(got[k], want[k]) for k in want)
    after = checkpoint_wrapper(Counted())
    _grads(after)
    assert after.calls == 2, "checkpointing must come back after the context"


class Tagged(nn.Module):
    """A stand-in wrapper class, as fairscale's wrap tests use: records its kwargs."""

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        super().__init__()
        self.module = module
        self.kwargs = kwargs

    def forward(self, *args: Any) -> Any:
        return self.module(*args)


def test_config_auto_wrap_holds_the_context_and_wraps_recursively() -> None:
    from shardcompat.fairscale.nn.wrap import auto_wrap as auto_wrap_function
    from shardcompat.fairscale.nn.wrap import default_auto_wrap_policy, enable_wrap, wrap
    from shardcompat.fairscale.nn.wrap.auto_wrap import ConfigAutoWrap, auto_wrap

    assert auto_wrap is auto_wrap_function
    assert not ConfigAutoWrap.in_autowrap_context and ConfigAutoWrap.wrapper_cls is None
    model = nn.Sequential(nn.Linear(10, 10), nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 1)), nn.ReLU())
    assert auto_wrap(model) is model and wrap(model) is model, "outside the context nothing is wrapped"
    with enable_wrap(wrapper_cls=Tagged, flag=1):
        assert ConfigAutoWrap.in_autowrap_context and ConfigAutoWrap.wrapper_cls is Tagged
        assert ConfigAutoWrap.kwargs == {"flag": 1} and ConfigAutoWrap.auto_wrap_policy is default_auto_wrap_policy
        with pytest.raises(NotImplementedError, match="nested"), enable_wrap(wrapper_cls=Tagged):
            pass
        policy = lambda module, recurse, unwrapped_params, module_is_root: (  # noqa: E731
            recurse or unwrapped_params >= 100)
        # 110 + (110 + 11) parameters: each 110 is wrapped; the 11 left over, in the inner and
        # the outer Sequential, are under the threshold, so neither is.
        wrapped, count = ConfigAutoWrap.recursive_wrap(copy.deepcopy(model), policy, module_is_root=True, extra=2)
        assert isinstance(wrapped, nn.Sequential) and count == 220
        assert isinstance(wrapped[0], Tagged) and wrapped[0].kwargs == {"flag": 1, "extra": 2}
        assert isinstance(wrapped[1], nn.Sequential) and isinstance(wrapped[1][0], Tagged)
        assert not isinstance(wrapped[1][1], Tagged) and not isinstance(wrapped[2], Tagged)
        whole, count = ConfigAutoWrap.recursive_wrap(copy.deepcopy(model), lambda **kw: True, module_is_root=True)
        assert isinstance(whole, Tagged) and count == sum(p.numel() for p in model.parameters())
    assert not ConfigAutoWrap.in_autowrap_context and ConfigAutoWrap.kwargs == {}
    with ConfigAutoWrap(None, wrapper_cls=Tagged):  # fairscale's own spelling of the context
        assert isinstance(wrap(nn.Linear(2, 2)), Tagged)
    assert not ConfigAutoWrap.in_autowrap_context


def test_torch_version_from_both_old_paths() -> None:
    from shardcompat.fairscale.internal import torch_version
    from shardcompat.fairscale.utils import torch_version as old_path

    assert torch_version is old_path
    assert torch_version() == tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:3])
    assert torch_version("1.8.0a0+git1234") == (1, 8, 0)
    assert torch_version("2.1.0.dev20230101") == (2, 1, 0)
    assert torch_version("1.10") == (1, 10, 0)
    assert torch_version("nightly") == ()
    assert torch_version() >= (1, 8, 0)


_TRAINER_GATE = """
import importlib.metadata, json, sys
from packaging import version
import shardcompat.fairscale as fairscale  # the Transformers 4.x Trainer's block, prefix swapped
gate = version.parse(fairscale.__version__) >= version.parse("0.3")
loaded = "fairscale" in sys.modules
if gate:
    from shardcompat.fairscale.nn.data_parallel import FullyShardedDataParallel as FullyShardedDDP
else:
    FullyShardedDDP = None
from shardcompat.fairscale import __version_tuple__
from shardcompat.fairscale.version import __version_tuple__ as from_module
try:
    installed = importlib.metadata.version("fairscale")
except importlib.metadata.PackageNotFoundError:
    installed = None
print(json.dumps({"version": fairscale.__version__, "tuple": list(__version_tuple__),
                  "same": from_module is __version_tuple__, "fsdp": FullyShardedDDP is not None,
                  "installed": installed, "loaded": loaded}))
"""


@pytest.mark.parametrize("setting", ["auto", "native"])
def test_version_gates_take_the_branch_they_took_under_fairscale(setting: str) -> None:
    """``__version__`` is the fairscale API served: the installed release's, else 0.4.13."""
    env = {**os.environ, "SHARDCOMPAT_FAIRSCALE": setting}
    done = subprocess.run([sys.executable, "-c", _TRAINER_GATE], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    want = got["installed"] if got["installed"] and setting == "auto" else "0.4.13"
    assert got["version"] == want
    assert got["tuple"] == [int(part) for part in want.split(".")] and got["same"]
    assert got["fsdp"] == (version.parse(want) >= version.parse("0.3"))
    assert not got["loaded"], "reading the version must not import fairscale"


# -- 2 ranks -------------------------------------------------------------------------------------

def _ours(caught: list[warnings.WarningMessage]) -> list[str]:
    """Deprecation warnings whose origin (the caller torch blames) is shardcompat's code."""
    return [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
            if issubclass(w.category, (DeprecationWarning, FutureWarning)) and w.filename.startswith(PACKAGE_DIR)]


def _buffers_case(broadcast_buffers: bool, rank: int) -> dict[str, Any]:
    from shardcompat.fairscale.nn.data_parallel import ShardedDataParallel
    from shardcompat.fairscale.optim.oss import OSS

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    optimizer = OSS(model.parameters(), optim=torch.optim.SGD, lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = ShardedDataParallel(model, optimizer, broadcast_buffers=broadcast_buffers)
        torch.manual_seed(10 + rank)  # different data per rank: different batch statistics
        for _ in range(2):
            wrapped(torch.randn(6, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        wrapped.eval()  # a forward that syncs buffers (or not) without updating them after
        wrapped(torch.randn(6, 4))
    return {"mean": model[1].running_mean.clone(), "warnings": _ours(caught)}


def _unflat_case(rank: int) -> dict[str, Any]:
    """flatten_parameters=False, odd sizes (the shards need padding), full sharding, vs DDP."""
    from shardcompat.fairscale.nn.data_parallel.fully_sharded_data_parallel import (
        FullyShardedDataParallel,
    )

    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 1))

    results = {}
    for name in ("ddp", "fsdp"):
        model = build()
        wrapped: Any = (nn.parallel.DistributedDataParallel(model) if name == "ddp"
                        else FullyShardedDataParallel(model, flatten_parameters=False))
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1)
        torch.manual_seed(20 + rank)
        losses = []
        for _ in range(3):
            loss = wrapped(torch.randn(4, 5)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        state = {k: v.clone() for k, v in wrapped.state_dict().items()} if name == "fsdp" else {
            k: v.clone() for k, v in model.state_dict().items()}
        results[name] = {"losses": losses, "state": state}
    return results


def run(rank: int, world: int) -> dict[str, Any]:
    return {"sync": _buffers_case(True, rank), "no_sync": _buffers_case(False, rank), "unflat": _unflat_case(rank)}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = spawn(run, 2, (), timeout=240)
    return out


def test_sharded_ddp_broadcast_buffers_without_deprecation_warnings(ranks: list[dict[str, Any]]) -> None:
    """Issue 21 §7: torch 2.13 deprecates DDP's broadcast_buffers; the facade must not trip it."""
    for rank in ranks:
        assert rank["sync"]["warnings"] == [] and rank["no_sync"]["warnings"] == []
    synced = [rank["sync"]["mean"] for rank in ranks]
    assert torch.equal(synced[0], synced[1]), "broadcast_buffers=True: rank 0's buffers at every forward"
    kept = [rank["no_sync"]["mean"] for rank in ranks]
    assert not torch.allclose(kept[0], kept[1]), "broadcast_buffers=False: each rank keeps its own statistics"


def test_fsdp_without_flattening_trains_as_ddp(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        got, want = rank["unflat"]["fsdp"], rank["unflat"]["ddp"]
        assert max(abs(a - b) for a, b in zip(got["losses"], want["losses"], strict=True)) <= FP32_TOL
        assert max_diff(got["state"], want["state"]) <= FP32_TOL
        assert want["losses"][-1] < want["losses"][0], "the reference did not learn; the test would prove nothing"
