"""Collective bytes counted at the dispatcher: against hand-built DDP and FSDP2 on real gloo
ranks (no shardcompat code in the step), and in the report of ``shardcompat train``."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from typing import Any

import pytest
import torch
from torch import nn

from shardcompat.comm import KINDS, CommCounter
from shardcompat.launch import spawn
from shardcompat.memory import zero_model_volume
from shardcompat.train.models import GPT, GPTBlock, ModelConfig, count_parameters

F32 = 4
CONFIG = ModelConfig(layers=2, dim=32, heads=4, vocab=64, seq_len=16)  # every size even: no padding on 2 ranks


def _one_step(model: nn.Module) -> None:
    torch.manual_seed(1)
    tokens = torch.randint(0, CONFIG.vocab, (2, CONFIG.seq_len))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(tokens).float().pow(2).mean().backward()
    optimizer.step()


def _hand_built(rank: int, world_size: int) -> dict[str, Any]:
    """One step of each, built with torch's own calls, counted by CommCounter."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(GPT(CONFIG), bucket_cap_mb=0.01)  # several buckets
    for _ in range(2):  # DDP's first step runs in one bucket; the second broadcasts the rebuilt ones
        _one_step(ddp)
    with CommCounter() as counter:
        _one_step(ddp)
    out = {"ddp": counter.volume.as_dict(), "tensors": len(list(ddp.parameters()))}
    torch.manual_seed(0)
    model = GPT(CONFIG)
    mesh = init_device_mesh("cpu", (world_size,))
    for block in model.modules():
        if isinstance(block, GPTBlock):
            fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # torch's default: the root stays gathered after forward
    with CommCounter() as counter:
        _one_step(model)
    out["fsdp2"] = counter.volume.as_dict()
    return out


@pytest.fixture(scope="module")
def hand_built() -> dict[str, Any]:
    result: dict[str, Any] = spawn(_hand_built, 2, timeout=240)[0]
    return result


def test_ddp_all_reduces_every_gradient_once_in_its_buckets(hand_built: dict[str, Any]) -> None:
    """DDP's C++ reducer issues the all-reduce: counted all the same, 2Ψ, one call per bucket."""
    psi = count_parameters(GPT(CONFIG)) * F32
    ddp = hand_built["ddp"]
    assert ddp["bytes"] == {**dict.fromkeys(KINDS, 0), "all-reduce": 2 * psi}
    assert 1 < ddp["calls"]["all-reduce"] < hand_built["tensors"]  # one per bucket (bucket_cap_mb=0.01)
    assert ddp["total"] == zero_model_volume(0, psi)


def test_fsdp2_gathers_each_unit_twice_and_the_root_once(hand_built: dict[str, Any]) -> None:
    model = GPT(CONFIG)
    psi = count_parameters(model) * F32
    blocks = sum(p.numel() for b in model.blocks for p in b.parameters()) * F32
    fsdp2 = hand_built["fsdp2"]
    assert fsdp2["bytes"]["all-gather"] == psi + blocks  # forward: every unit; backward: the blocks again
    assert fsdp2["bytes"]["reduce-scatter"] == psi
    assert fsdp2["bytes"]["all-reduce"] == fsdp2["bytes"]["broadcast"] == 0
    assert fsdp2["calls"] == {**dict.fromkeys(KINDS, 0), "all-gather": 2 + 3, "reduce-scatter": 3}
    assert fsdp2["total"] == zero_model_volume(3, psi) - (psi - blocks)  # the root is not gathered again


def test_other_operators_pass_through_untouched() -> None:
    with CommCounter() as counter:
        out = torch.ones(3) * 2
    assert out.tolist() == [2.0, 2.0, 2.0] and counter.volume.total == 0 and counter.volume.other == 0


def _train_json(*argv: str) -> dict[str, Any]:
    from shardcompat import train

    parser = argparse.ArgumentParser()
    train.configure_parser(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert train.run(parser.parse_args([*argv, "--steps", "3", "--json"])) == 0
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


@pytest.mark.timeout(240)
def test_the_train_report_counts_zero_1_on_torch_zero() -> None:
    """The gradients reduce-scattered to their owners (Ψ, the DDP hook) plus
    ZeroRedundancyOptimizer's broadcasts (Ψ), one per rank's bucket: ZeRO-1's 2Ψ."""
    data = _train_json("--sharded_ddp", "zero_dp_1", "--backend", "torch-zero")
    psi = data["model"]["parameters"] * F32
    for rank in data["runs"][0]["ranks"]:
        comm = rank["comm"]
        assert comm["bytes"]["reduce-scatter"] == psi and comm["bytes"]["broadcast"] == psi
        assert comm["bytes"]["all-reduce"] == 0
        assert comm["calls"]["broadcast"] == 2  # bucketed: one per owner, not one per parameter
        assert comm["zero_model_ratio"] == 1.0
    from shardcompat.train.report import render_table

    assert "(1.00x)" in render_table(data)
