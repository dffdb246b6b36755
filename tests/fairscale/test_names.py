"""The names fairscale users import beside the classes, in one process (no ranks needed).

``checkpoint_wrapper`` against the same module unwrapped, fairscale's offline
``consolidate_shard_weights`` on hand-written shards, the refusals of what is not served, and,
with fairscale installed, that the native classes keep fairscale's signatures (the module tree
itself is ``test_tree``'s).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from typing import Any

import pytest
import torch
from torch import nn

import shardcompat.fairscale as facade
from shardcompat.backends._fairscale_common import import_fairscale
from shardcompat.fairscale import _fsdp, _oss, _scaler, _sdp, _unserved

# What the signature checks compare against (releases before 0.3.7, without nn.checkpoint, skip).
FAIRSCALE_MODULES = ["fairscale.nn.data_parallel", "fairscale.optim.grad_scaler", "fairscale.nn.checkpoint"]


class Probe(nn.Module):
    """Records, at each forward, whether the first forward or the recomputation is running."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((facade.is_checkpointing(), facade.is_recomputing()))
        return x


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Linear(8, 3))
        self.probe = Probe()

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> tuple[torch.Tensor, str]:
        return self.probe(self.net(x)) * scale, "not a tensor"


def _step(block: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(1)  # the dropout mask
    out, tag = block(torch.randn(6, 4), scale=2.0)
    assert tag == "not a tensor"
    out.pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in block.named_parameters()}
    return out.detach(), {**grads, **{n: b.clone() for n, b in block.named_buffers()}}


@pytest.mark.parametrize("offload_to_cpu", [False, True])
def test_checkpoint_wrapper_is_the_same_computation(offload_to_cpu: bool) -> None:
    """fairscale's test_checkpoint_activations: same outputs, gradients and batch-norm statistics
    (updated once, not again when recomputed), the module kept in place."""
    try:
        facade.is_checkpointing  # noqa: B018
    except AttributeError as error:  # a fairscale before 0.3.7 serves checkpoint_wrapper here, without it
        pytest.skip(str(error))
    plain, block = Block(), Block()
    wrapped = facade.checkpoint_wrapper(block, offload_to_cpu=offload_to_cpu)
    assert wrapped is block and type(wrapped) is Block and wrapped.state_dict().keys() == plain.state_dict().keys()
    want_out, want = _step(plain)
    got_out, got = _step(wrapped)
    assert torch.equal(got_out, want_out)
    assert got.keys() == want.keys() and all(torch.allclose(got[k], want[k]) for k in want), "gradients or stats differ"
    assert int(got["net.1.num_batches_tracked"]) == 1
    assert block.probe.seen == [(True, False), (False, True)], "is_checkpointing / is_recomputing"
    with torch.no_grad():
        wrapped(torch.randn(2, 4))
    assert block.probe.seen[-1] == (False, False), "without grad there is nothing to checkpoint"


def test_consolidate_shard_weights_offline() -> None:
    """test_consolidate_missing_params, and the padding, unsharded-expert and shared-parameter
    rules of fairscale's format, on hand-written two-rank shards (no process group)."""
    full = torch.arange(7.0)  # a.weight (2x2) and a.bias (3,), split 4 + 3 (+1 padding on rank 1)
    expert = torch.arange(10.0, 14.0)  # not sharded: read from rank 0's file only

    def meta(padding: int) -> dict[str, Any]:
        return {"param_metadata": [
            {"fsdp_path": "", "params": {"flat_param_0": {"names": ["absent"], "shapes": [(3,)], "numels": [3],
                                                          "padding": 0}},
             "no_broadcast_optim_state": False, "shared_param_info": []},
            {"fsdp_path": "enc", "params": {"flat_param_0": {"names": ["a.weight", "a.bias"], "shapes": [(2, 2), (3,)],
                                                             "numels": [4, 3], "padding": padding}},
             "no_broadcast_optim_state": False, "shared_param_info": []},
            {"fsdp_path": "moe", "params": {"w": {"names": ["w"], "shapes": [(2, 2)], "numels": [4], "padding": 0}},
             "no_broadcast_optim_state": True, "shared_param_info": [("enc.a.bias", "dec.bias")]},
        ], "buffer_names": ["enc.running", "gone"]}

    shards = [{"enc.flat_param_0": full[:4], "moe.w": expert, "enc.running": torch.tensor([5.0])},
              {"enc.flat_param_0": torch.cat([full[4:], torch.zeros(1)]), "moe.w": expert + 100}]
    cls = facade.FullyShardedDataParallel
    out = cls.consolidate_shard_weights(shards, [meta(0), meta(1)], strict=False)
    assert sorted(out) == ["dec.bias", "enc.a.bias", "enc.a.weight", "enc.running", "moe.w"]
    assert torch.equal(out["enc.a.weight"], full[:4].view(2, 2)) and torch.equal(out["enc.a.bias"], full[4:])
    assert torch.equal(out["dec.bias"], full[4:]) and torch.equal(out["moe.w"], expert.view(2, 2))
    assert torch.equal(out["enc.running"], torch.tensor([5.0]))
    no_buffers = cls.consolidate_shard_weights(shards, [meta(0), meta(1)], with_module_buffers=False, strict=False)
    assert "enc.running" not in no_buffers
    with pytest.raises(ValueError):
        cls.consolidate_shard_weights(shards, [meta(0)])
    with pytest.raises(KeyError):
        cls.consolidate_shard_weights(shards, [meta(0), meta(1)])  # strict: "absent" must be there


def test_unserved_names_say_why_and_what_instead() -> None:
    for name, row in _unserved.UNSERVED.items():
        with pytest.raises(AttributeError) as caught:
            getattr(facade, name)
        assert name in str(caught.value) and row.instead in str(caught.value)
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        facade.nonsense  # noqa: B018


def test_auto_wrap_bn_tags_batch_norm_layers() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Sequential(nn.BatchNorm1d(4)))
    config = {"flatten_parameters": True}
    assert facade.auto_wrap_bn(model, fsdp_config=config, wrap_it=False) is model
    assert model[1].wrapper_config is config and model[2][0].wrapper_config is config
    assert not hasattr(model[0], "wrapper_config")
    with pytest.raises(ValueError, match="already has a wrapper_config"):
        facade.auto_wrap_bn(model, fsdp_config=config, wrap_it=False)
    assert facade.get_fsdp_instances(model) == []


def _fairscale() -> dict[str, Any]:
    found, why = import_fairscale(FAIRSCALE_MODULES)
    if not found:
        pytest.skip(why)
    return found


@pytest.mark.fairscale
@pytest.mark.parametrize("native, where", [
    (_oss.NativeOSS, "fairscale.optim.oss.OSS"),
    (_sdp.NativeShardedDataParallel, "fairscale.nn.data_parallel.sharded_ddp.ShardedDataParallel"),
    (_fsdp.NativeFullyShardedDataParallel,
     "fairscale.nn.data_parallel.fully_sharded_data_parallel.FullyShardedDataParallel"),
    (_scaler.NativeShardedGradScaler, "fairscale.optim.grad_scaler.ShardedGradScaler"),
])
def test_native_signatures_are_fairscales(native: type, where: str) -> None:
    """The constructor: fairscale's parameter names in fairscale's order.  Every public method
    and property of fairscale's class: present, and taking each of its named parameters."""
    _fairscale()
    module, name = where.rsplit(".", 1)
    real = getattr(importlib.import_module(module), name)
    ours = [(p.name, p.kind) for p in inspect.signature(native.__init__).parameters.values()]
    theirs = [(p.name, p.kind) for p in inspect.signature(real.__init__).parameters.values()]
    if importlib.metadata.version("fairscale") == "0.4.13":  # the release the facade's API follows
        assert ours == theirs
    else:  # an older release: its parameters in its order, among the ones 0.4.13 added
        remaining = iter(ours)
        assert all(param in remaining for param in theirs), f"{ours} does not extend {theirs}"
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for method, member in vars(real).items():
        if method.startswith("_") or not (callable(member) or isinstance(member, (property, staticmethod))):
            continue
        if method == "cpu_offload":  # an attribute set per instance natively (torch's config)
            continue
        assert hasattr(native, method), f"{name}.{method} is missing"
        if isinstance(member, property):
            continue
        mine = inspect.signature(getattr(native, method)).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in mine.values())
        for param in inspect.signature(getattr(real, method)).parameters.values():
            if param.kind in named:
                assert param.name in mine or takes_any, f"{name}.{method} does not take {param.name}="
