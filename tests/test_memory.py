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
