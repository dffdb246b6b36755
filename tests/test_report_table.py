"""The report's table explains itself: the phase each rank's state was counted after, and why a
row counted after forward shows ``grads 0 B`` next to whole parameters, in the words of that
run's own plan (ZeRO-2, or FSDP1's whole-model root unit under zero_dp_3)."""

from __future__ import annotations

from typing import Any

from shardcompat.train.report import render_table


def _rank(phase: str, params: int, grads: int) -> dict[str, Any]:
    return {"rank": 0, "params": params, "grads": grads, "optim": 8 * params, "total": 9 * params + grads,
            "cpu": 0, "peak_rss": 1 << 28, "median_step_s": 0.01, "state_phase": phase}


def _report(phase: str, options: str = "zero_dp_2") -> dict[str, Any]:
    run = {"label": options, "options": options, "backend": "torch-fsdp1", "losses": [1.0, 0.5],
           "ranks": [_rank(phase, 4000, 0)]}
    ddp = {"label": "ddp", "options": "", "backend": "torch-ddp", "losses": [1.0, 0.5],
           "ranks": [_rank("after backward", 4000, 4000)]}
    return {"model": {"kind": "gpt", "parameters": 1000}, "world_size": 2, "device": "cpu", "steps": 2,
            "batch_size": 8, "runs": [run], "reference": ddp}


def test_a_row_counted_after_forward_says_so_and_why_grads_are_zero() -> None:
    lines = render_table(_report("after forward")).splitlines()
    row = next(line.split() for line in lines if line.startswith("zero_dp_2  "))
    assert row[3:6] == ["forward", "3.9", "KiB"] and row[6:8] == ["0", "B"], row
    note = next(line for line in lines if "counted after forward" in line)
    assert note == ("(zero_dp_2 on torch-fsdp1 counted after forward: no gradients exist yet, and ZeRO-2 shards "
                    "only the gradients and optimizer state, never the parameters: hence grads 0 B next to "
                    "whole params)"), note
    ddp = next(line.split() for line in lines if line.startswith("ddp  "))
    assert ddp[3] == "backward"


def test_no_note_when_no_row_was_counted_after_forward() -> None:
    assert "counted after forward:" not in render_table(_report("after step"))


def test_zero_dp_3_counted_after_forward_names_the_root_unit_not_zero_dp_2() -> None:
    """FSDP1 keeps its root unit (the whole model without auto_wrap) gathered until backward."""
    note = next(line for line in render_table(_report("after forward", "zero_dp_3")).splitlines()
                if "counted after forward" in line)
    assert note.startswith("(zero_dp_3 on torch-fsdp1 counted after forward: no gradients exist yet, and FSDP1 "
                           "keeps its root unit"), note
    assert "zero_dp_2" not in note and "ZeRO-2" not in note, note
