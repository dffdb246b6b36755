"""Counting a rank's state from unique storages, and the peak-RSS window."""

from __future__ import annotations

import sys

import pytest
import torch

from shardcompat.memory import StateBytes, count_state, peak_rss, reset_peak_rss

F32 = 4


def test_sums_each_kind_separately() -> None:
    state = count_state([("param", torch.zeros(10)), ("grad", torch.zeros(3)), ("optim", torch.zeros(2, 2))])
    assert state == StateBytes(params=40, grads=12, optim=16, cpu=68)
    assert state.total == 68
    assert state.as_dict() == {"params": 40, "grads": 12, "optim": 16, "cpu": 68, "total": 68}


def test_a_shared_storage_counts_once() -> None:
    weight = torch.nn.Parameter(torch.zeros(8, 4))
    embed, head = torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8, bias=False)
    head.weight = embed.weight = weight  # tied weights, as GPT-2 ties embedding and LM head
    tensors = [("param", embed.weight), ("param", head.weight), ("param", weight.detach())]
    assert count_state(tensors).params == 32 * F32


def test_views_of_one_flat_buffer_count_the_buffer_once() -> None:
    flat = torch.zeros(100)  # as FSDP's FlatParameter, or a gradient bucket
    views = [flat[:40].view(4, 10), flat[40:90].view(5, 10), flat[90:]]
    assert count_state(("param", v) for v in views).params == 100 * F32


def test_a_partial_view_counts_the_whole_storage_it_keeps_alive() -> None:
    flat = torch.zeros(100)
    assert count_state([("grad", flat[:10])]).grads == 100 * F32


def test_a_storage_seen_as_two_kinds_counts_under_the_first() -> None:
    bucket = torch.zeros(16)
    state = count_state([("param", bucket[:8]), ("grad", bucket[8:]), ("optim", torch.zeros(4))])
    assert (state.params, state.grads, state.optim) == (16 * F32, 0, 4 * F32)


def test_freed_and_meta_storages_hold_nothing() -> None:
    freed = torch.zeros(50)
    freed.untyped_storage().resize_(0)  # how FSDP frees an unsharded parameter
    meta = torch.empty(1000, device="meta")
    assert count_state([("param", freed), ("param", meta)]).total == 0


def test_dtype_sizes_are_counted_in_bytes() -> None:
    state = count_state([("param", torch.zeros(10, dtype=torch.bfloat16)), ("optim", torch.zeros(10, dtype=torch.float64))])
    assert (state.params, state.optim) == (20, 80)


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown state kind 'buffer'"):
        count_state([("buffer", torch.zeros(1))])


@pytest.mark.gpu
def test_device_bytes_are_not_cpu_bytes() -> None:
    state = count_state([("param", torch.zeros(10, device="cuda")), ("optim", torch.zeros(10))])
    assert (state.total, state.cpu) == (80, 40)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the resettable high-water mark is Linux's")
def test_peak_rss_sees_a_spike_and_reset_starts_a_new_window() -> None:
    assert reset_peak_rss()
    before = peak_rss()
    spike = torch.ones(64 * 2**20 // F32)  # 64 MiB, touched
    during = peak_rss()
    del spike  # large blocks go back to the OS at once
    assert during - before >= 60 * 2**20
    assert reset_peak_rss()
    assert peak_rss() < during - 32 * 2**20


# --------------------------------------------------------------------------- the ZeRO model and its note
PSI = 1_000_000


def test_the_zero_model_per_stage() -> None:
    from shardcompat.memory import zero_model_bytes, zero_model_host_bytes

    assert [zero_model_bytes(stage, PSI, 4) / PSI for stage in range(4)] == [16, 10, 7, 4]
    assert zero_model_host_bytes(3, PSI, 4) == zero_model_bytes(3, PSI, 4)
    assert zero_model_host_bytes(0, PSI, 4) == 0


def test_on_the_model_within_five_percent_needs_no_note() -> None:
    from shardcompat.memory import off_model_reason, zero_model_bytes

    model = zero_model_bytes(3, PSI, 2)
    assert off_model_reason("zero_dp_3", "torch-fsdp2", 2, PSI, 1.049 * model, stage=3) is None
    assert off_model_reason("zero_dp_3", "torch-fsdp2", 2, PSI, 0.951 * model, stage=3) is None


@pytest.mark.parametrize("nproc", [2, 4])
def test_a_gathered_root_is_named_only_when_its_bytes_match(nproc: int) -> None:
    """FSDP1 without auto_wrap ends forward holding ZeRO-2's bytes; anything else is not blamed on it."""
    from shardcompat.memory import UNEXPLAINED, off_model_reason, zero_model_bytes

    gathered = zero_model_bytes(2, PSI, nproc)
    note = off_model_reason("zero_dp_3", "torch-fsdp1", nproc, PSI, gathered, stage=3)
    assert note is not None and note.startswith(f"{gathered / zero_model_bytes(3, PSI, nproc):.2f}x the ZeRO-3 model")
    assert "root unit" in note and "add auto_wrap" in note and UNEXPLAINED not in note
    wrong = off_model_reason("zero_dp_3", "torch-fsdp1", nproc, PSI, 1.3 * gathered, stage=3)
    assert wrong is not None and UNEXPLAINED in wrong
    # auto_wrap has no such root: the same bytes are unexplained there
    wrapped = off_model_reason("zero_dp_3 auto_wrap", "torch-fsdp1", nproc, PSI, gathered, stage=3)
    assert wrapped is not None and UNEXPLAINED in wrapped


def test_fairscale_offload_adds_its_host_gradient_shard() -> None:
    from shardcompat.memory import off_model_reason, zero_model_bytes

    held = zero_model_bytes(2, PSI, 2) + 4 * PSI / 2
    note = off_model_reason("zero_dp_3 offload", "fairscale-fsdp", 2, PSI, held, stage=3)
    assert note is not None and note.startswith("1.50x") and "host gradient shard" in note


@pytest.mark.parametrize("backend", ["torch-fsdp1", "torch-fsdp2", "fairscale-fsdp"])
def test_mixed_precision_gathers_16_bit_parameters(backend: str) -> None:
    """zero_dp_2 with bf16 holds 2Ψ of gathered parameters where the fp32 model counts 4Ψ
    (measured: 0.80x on 2 ranks on all three); autocast backends keep fp32 parameters."""
    from shardcompat.memory import UNEXPLAINED, off_model_reason, zero_model_bytes

    held = zero_model_bytes(2, PSI, 2) - 2 * PSI
    note = off_model_reason("zero_dp_2 mixed_precision=bf16", backend, 2, PSI, held, stage=2)
    assert note is not None and note.startswith("0.80x") and "16-bit" in note and UNEXPLAINED not in note
    autocast = off_model_reason("zero_dp_1 mixed_precision=bf16", "torch-zero", 2, PSI, 0.8 * zero_model_bytes(1, PSI, 2),
                                stage=1)
    assert autocast is not None and UNEXPLAINED in autocast


def test_the_stage_is_the_plans() -> None:
    """torch-zero serves ``simple`` as ZeRO-1, so its note holds it to stage 1."""
    from shardcompat.memory import off_model_reason, plan_stage, zero_model_bytes

    assert plan_stage("simple", "torch-zero", 2) == 1
    assert plan_stage("zero_dp_3 auto_wrap", "torch-fsdp2", 2) == 3
    assert off_model_reason("simple", "torch-zero", 2, PSI, zero_model_bytes(1, PSI, 2)) is None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_train_report_prints_the_note_under_its_table() -> None:
    """Real runs: FSDP1 zero_dp_3 without auto_wrap gets the root-unit note, with auto_wrap none."""
    import argparse
    import contextlib
    import io

    from shardcompat import train

    def table(options: str) -> str:
        parser = argparse.ArgumentParser()
        train.configure_parser(parser)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert train.run(parser.parse_args(["--sharded_ddp", options, "--backend", "torch-fsdp1",
                                                "--steps", "2"])) == 0
        return out.getvalue()

    unwrapped = table("zero_dp_3").splitlines()
    note = [line for line in unwrapped if "the ZeRO-3 model" in line]
    assert len(note) == 1 and note[0].startswith("zero_dp_3 on torch-fsdp1: 1.25x the ZeRO-3 model"), unwrapped
    assert "add auto_wrap" in note[0]
    assert "the ZeRO-3 model" not in table("zero_dp_3 auto_wrap")
