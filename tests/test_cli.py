"""`shardcompat info | explain` and the compatibility matrix, run as a user runs them (the command line
as a process: refusals, closed pipes, Ctrl-C: tests/test_cli_process.py)."""

from __future__ import annotations

import json

import pytest

from shardcompat import cli, matrix
from shardcompat.options import BACKEND_NAMES, ShardingOptionsWarning


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_explain_shows_canonical_form_and_the_exact_calls(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "explain", "full_shard auto_wrap")
    assert code == 0
    assert "canonical:    zero_dp_3 auto_wrap" in out
    assert "--fsdp:       full_shard auto_wrap" in out
    assert "* torch-fsdp2:" in out and "fully_shard(" in out
    assert "  torch-zero: It does not serve zero_dp_3 (it serves plain DDP, simple, zero_dp_1)." in out


def test_explain_json_names_the_chosen_backend_and_every_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "explain", "zero_dp_1", "--json")
    data = json.loads(out)
    assert code == 0 and data["options"] == "zero_dp_1" and data["chosen"] == "torch-zero"
    assert [row["backend"] for row in data["backends"]] == list(data_order())
    assert all(("call" in row) != ("reason" in row) for row in data["backends"])


def data_order() -> list[str]:
    from shardcompat.backends import candidates

    return candidates("auto")


def test_explain_with_one_backend_that_cannot_serve_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "explain", "zero_dp_3 offload", "--backend", "torch-fsdp1")
    assert code == 1
    assert "chosen:       none can serve these options here" in out
    (line,) = [line for line in out.splitlines() if line.startswith("  torch-fsdp1: ")]
    assert line.startswith("  torch-fsdp1: FSDP1 CPUOffload(offload_params=True) needs an accelerator")
    assert "cannot serve" not in line and line.endswith("or run on CUDA."), "said once, capitalised"


@pytest.mark.parametrize(
    ("words", "flags"),
    [
        (["zero_dp_3", "offload"], []),
        (["zero_dp_3", "wrap=Block,", "Linear"], ["--json"]),
        (["zero_dp_2", "offload"], ["--backend", "torch-fsdp1"]),  # refused: the same refusal, exit 1
        (["zero_dp_3", "offload", "offload"], []),  # repeated: the same warning
    ],
    ids=lambda value: " ".join(value),
)
def test_explain_reads_unquoted_words_as_the_quoted_text(
    capsys: pytest.CaptureFixture[str], recwarn: pytest.WarningsRecorder, words: list[str], flags: list[str]
) -> None:
    """`shardcompat explain zero_dp_3 offload`, as a shell splits it, answers as the quoted text
    does (docs/options.md says so), with the flags before or after the words."""
    def answer(*argv: str) -> tuple[tuple[int, str], list[str]]:
        recwarn.clear()
        result = _run(capsys, "explain", *argv)
        return result, [str(w.message) for w in recwarn if issubclass(w.category, ShardingOptionsWarning)]

    quoted = answer(*flags, " ".join(words))
    assert answer(*flags, *words) == quoted == answer(*words, *flags)
    assert quoted[0][1].strip() and bool(quoted[1]) == (words.count("offload") > 1)


def test_explain_hybrid_needs_two_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run(capsys, "explain", "hybrid_shard", "--backend", "torch")
    assert code == 1
    code, out = _run(capsys, "explain", "hybrid_shard", "--nnodes", "2", "--backend", "torch")
    assert code == 0 and "placement:    4 rank(s) on 2 node(s)" in out


def test_info_lists_versions_and_every_backend(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "info", "--json")
    data = json.loads(out)
    assert code == 0 and data["versions"]["torch"]
    assert {b["name"] for b in data["backends"]} == set(BACKEND_NAMES)
    by_name = {b["name"]: b for b in data["backends"]}
    assert by_name["torch-zero"]["available"] is True
    assert all(b["available"] or b["reason"] for b in data["backends"]), "an unavailable backend must say why"


def test_matrix_records_render_and_check() -> None:
    record = matrix.collect()
    cells = record["cells"]["cpu, 2 ranks"]
    assert cells["torch-zero"]["zero_dp_1"] == "yes"
    assert cells["torch-zero"]["zero_dp_3"] == "-"
    assert cells["torch-fsdp2"]["zero_dp_3 offload"] == "yes"
    assert cells["torch-fsdp1"]["zero_dp_3 offload"].startswith("no: ")
    assert cells["torch-fsdp2"]["hybrid_shard"].startswith("no: ")
    assert record["cells"]["cpu, 2 nodes x 2 ranks"]["torch-fsdp2"]["hybrid_shard"] == "yes"
    table = matrix.render([record])
    assert matrix.check(table, [record]) == []
    stale = table.replace("| yes |", "| no: stale |", 1)
    assert matrix.check(stale, [record]) and "differs" in matrix.check(stale, [record])[0]
    other = {**record, "torch": "0.0.0"}
    assert "missing" in matrix.check(table, [other])[0]


def test_explain_fairscale_says_which_implementation_serves_each_class(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "explain", "--fairscale", "--json")
    lines = json.loads(out)["fairscale_facade"]
    for name in ("OSS", "ShardedDataParallel", "FullyShardedDataParallel", "ShardedGradScaler"):
        assert any(line.startswith(f"{name}: ") for line in lines), lines
    assert code == 0  # options default to off: plain DDP is always servable


def test_explain_plans_for_the_launchers_layout_when_run_under_torchrun(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchrun sets WORLD_SIZE and LOCAL_WORLD_SIZE; hybrid sharding needs the 2 nodes they imply."""
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    code, out = _run(capsys, "explain", "hybrid_shard", "--backend", "torch", "--json")
    placement = json.loads(out)["placement"]
    assert code == 0
    assert (placement["world_size"], placement["nnodes"], placement["ranks_per_node"]) == (8, 2, 4)
    assert "LOCAL_WORLD_SIZE" in placement["source"]


def test_explain_command_line_layout_wins_over_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    code, out = _run(capsys, "explain", "hybrid_shard", "--nnodes", "4", "--nproc-per-node", "8", "--backend", "torch")
    assert code == 0
    assert "32 rank(s) on 4 node(s) of 8, cpu (from the command line)" in out
    code = cli.main(["explain", "--nnodes", "0"])
    assert code == 2 and "--nnodes must be at least 1, got 0" in capsys.readouterr().err


def test_the_multinode_table_claims_only_options_the_two_agent_tests_run() -> None:
    """Every option the table calls verified on two agents is trained by tests/multinode, and
    the committed docs/compatibility.md carries the table as the code renders it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sources = "".join(p.read_text() for p in (root / "tests" / "multinode").glob("test_*.py"))
    for options in matrix.MULTINODE_VERIFIED:
        if options:
            assert f'"{options}"' in sources, options
    assert matrix.multinode_section() in (root / "docs" / "compatibility.md").read_text()
    assert all(line.endswith("| unverified |") for line in matrix.multinode_section().splitlines()[4:])
