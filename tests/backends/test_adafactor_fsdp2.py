"""Transformers' Adafactor under FSDP2 (``zero_dp_2``, ``zero_dp_3 auto_wrap``) equals
unsharded Adafactor under plain DDP: weights and losses within 1e-5 over 20 steps, its
consolidated state equal to the reference's, and a save resumed on another backend (both
ways, full and sharded checkpoints) ends where the uninterrupted DDP run does.

The model has what the factored statistics meet in real models, with dims that do not split
evenly over 2 ranks: an embedding with 33 rows (2-D), linear layers and layer norms (2-D and
1-D), a 3-D parameter (3 x 16 x 16), dropout on (both sides draw the same masks: each run
seeds the same stream per rank; a resume restores it from the checkpoint).  Adafactor as the
Trainer builds it (``--optim adafactor``: fixed lr, no parameter scaling), with its own
defaults (relative step, parameter scaling), and with momentum and weight decay; in
float32 and with bfloat16 parameters (which Adafactor steps in float32).

One spawn of 2 gloo ranks for everything, 16 runs of 20 steps: about 35 s.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from shardcompat.launch import spawn
from tests._parity import Block

pytest.importorskip("transformers")

STEPS, RESUME_AT = 20, 10
VOCAB, DIM, BATCH, SEQ = 33, 16, 4, 8
TOL = 1e-5  # bfloat16 too: its weights came out bit for bit equal (measured)
ADAFACTOR: dict[str, dict[str, Any]] = {
    "trainer": {"lr": 1e-2, "scale_parameter": False, "relative_step": False, "warmup_init": False},
    "relative": {"lr": None},  # relative_step, scale_parameter: Adafactor's defaults
    "momentum": {"lr": None, "beta1": 0.9, "weight_decay": 0.01},
}
SHARDED = ("zero_dp_2", "zero_dp_3 auto_wrap")


class Factored(nn.Module):
    """1-D, 2-D and 3-D parameters, uneven over 2 ranks, dropout on."""

    _no_split_modules: ClassVar[list[str]] = ["Block"]

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.Sequential(Block(), Block())
        self.mix = nn.Parameter(torch.randn(3, DIM, DIM) / DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.drop(self.embed(tokens)))
        h = h + torch.einsum("bsd,kde->bse", h, self.mix) / 3
        return self.head(h)


def _adafactor(kwargs: dict[str, Any], params: Any) -> torch.optim.Optimizer:
    from transformers.optimization import Adafactor

    optimizer: torch.optim.Optimizer = Adafactor(params, **kwargs)
    return optimizer


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(100 * step + rank))
    return tokens, (3 * tokens + 1) % VOCAB  # learnable, so a reference that learns nothing shows


def _model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return Factored().to(dtype)


class _DDP:
    """Plain DDP and unsharded Adafactor, built by hand (not through shardcompat)."""

    def __init__(self, model: nn.Module, kwargs: dict[str, Any]) -> None:
        self.module, self.model = model, nn.parallel.DistributedDataParallel(model)
        self.optimizer = _adafactor(kwargs, self.model.parameters())

    def state(self) -> dict[str, dict[str, Any]]:
        return {n: dict(self.optimizer.state[p]) for n, p in self.module.named_parameters()}

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.module.state_dict().items()}


def _steps(runner: Any, rank: int, start: int, stop: int) -> list[float]:
    losses = []
    for step in range(start, stop):
        x, y = _batch(rank, step)
        loss = nn.functional.cross_entropy(runner.model(x).float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        runner.optimizer.step()
        runner.optimizer.zero_grad()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / dist.get_world_size())
    return losses


def _prepare(options: str, kwargs: dict[str, Any], dtype: torch.dtype) -> Any:
    import shardcompat

    return shardcompat.prepare(_model(dtype), functools.partial(_adafactor, kwargs), options)


def _run(rank: int, options: str | None, variant: str, dtype: torch.dtype) -> dict[str, Any]:
    kwargs = ADAFACTOR[variant]
    runner = _DDP(_model(dtype), kwargs) if options is None else _prepare(options, kwargs, dtype)
    torch.manual_seed(1234 + rank)  # dropout: the same stream on both sides
    losses = _steps(runner, rank, 0, STEPS)
    if options is None:
        return {"losses": losses, "weights": runner.weights(), "state": runner.state()}
    optim = runner.optimizer_state_dict()
    names = {id(p): n for n, p in runner.module.named_parameters()}
    local = {names[id(p)]: {k: (tuple(v.to_local().shape), repr(v.placements[0])) for k, v in state.items()
                            if isinstance(v, DTensor)}
             for p, state in runner.optimizer.state.items()}  # this rank's own shards
    return {"losses": losses, "weights": runner.full_state_dict(), "state": optim.get("state", {}),
            "backend": runner.backend, "local": local}


def _resume(rank: int, first: str, then: str, folder: Path, sharded: bool) -> dict[str, Any]:
    kwargs = ADAFACTOR["momentum"]
    before = _prepare(first, kwargs, torch.float32)
    torch.manual_seed(1234 + rank)
    losses = _steps(before, rank, 0, RESUME_AT)
    before.save_checkpoint(folder, sharded=sharded)
    after = _prepare(then, kwargs, torch.float32)
    after.load_checkpoint(folder)  # weights, Adafactor's state, the dropout stream
    losses += _steps(after, rank, RESUME_AT, STEPS)
    return {"losses": losses, "weights": after.full_state_dict(), "backends": [before.backend, after.backend]}


RUNS = [(o, v, torch.float32) for v in ADAFACTOR for o in (None, *SHARDED)]
RUNS += [(o, "trainer", torch.bfloat16) for o in (None, *SHARDED)]
RUNS += [("zero_dp_3 offload", "trainer", torch.float32)]  # CPUOffloadPolicy: the state on the host
RESUMES = [("zero_dp_2", "simple", False), ("simple", "zero_dp_3 auto_wrap", False),
           ("zero_dp_3 auto_wrap", "zero_dp_2", True)]


def _worker(rank: int, world_size: int, folder: str) -> dict[str, Any]:
    runs = {run: _run(rank, *run) for run in RUNS}
    resumed = {r: _resume(rank, r[0], r[1], Path(folder) / f"{i}", r[2]) for i, r in enumerate(RESUMES)}
    return {"runs": runs, "resumed": resumed}


@functools.cache
def _results(folder: str) -> dict[str, Any]:
    result: dict[str, Any] = spawn(_worker, 2, (folder,), timeout=400)[0]
    return result


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _results(str(tmp_path_factory.mktemp("adafactor")))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), sorted(a.keys() ^ b.keys())
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a.values(), (b[k] for k in a)))


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("run", [r for r in RUNS if r[0] is not None], ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_adafactor_on_fsdp2_trains_as_unsharded_adafactor_under_ddp(
    results: dict[str, Any], run: tuple[str, str, torch.dtype],
) -> None:
    got, want = results["runs"][run], results["runs"][(None, *run[1:])]
    tol = TOL
    assert got["backend"] == "torch-fsdp2"
    assert max(abs(a - b) for a, b in zip(got["losses"], want["losses"])) <= tol, (got["losses"], want["losses"])
    assert _max_diff(got["weights"], want["weights"]) <= tol
    assert want["losses"][-1] < want["losses"][0], "the reference did not learn: the test would prove nothing"
    # consolidated state, keyed by name: the factored row and column statistics of every matrix
    assert got["state"].keys() == want["state"].keys()
    for name, state in want["state"].items():
        assert got["state"][name].keys() == state.keys(), name
        for key, value in state.items():
            mine = got["state"][name][key]
            if key == "step":
                assert int(mine) == value == STEPS
            else:
                scale = max(1.0, float(torch.as_tensor(value).abs().max()))
                assert float((torch.as_tensor(mine) - value).abs().max()) <= tol * scale, (name, key)
    # each rank holds its shard of the statistics: rank 0 has 17 of the embedding's 33 rows
    # (the columns, a mean over the rows, are whole on every rank) and 2 of mix's 3 slices
    assert got["local"]["embed.weight"]["exp_avg_sq_row"] == ((17,), "Shard(dim=0)")
    assert got["local"]["embed.weight"]["exp_avg_sq_col"] == ((DIM,), "Replicate()")
    assert got["local"]["mix"]["exp_avg_sq_row"] == got["local"]["mix"]["exp_avg_sq_col"] == ((2, DIM), "Shard(dim=0)")
    assert got["state"]["mix"]["exp_avg_sq_row"].shape == got["state"]["mix"]["exp_avg_sq_col"].shape == (3, DIM)


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("resume", RESUMES, ids=lambda r: f"{r[0]}-to-{r[1]}{'-sharded' if r[2] else ''}")
def test_adafactor_state_resumes_across_backends(results: dict[str, Any], resume: tuple[str, str, bool]) -> None:
    got, want = results["resumed"][resume], results["runs"][(None, "momentum", torch.float32)]
    assert got["backends"] == [{"simple": "torch-zero"}.get(o, "torch-fsdp2") for o in resume[:2]]
    assert max(abs(a - b) for a, b in zip(got["losses"], want["losses"])) <= TOL, (got["losses"], want["losses"])
    assert _max_diff(got["weights"], want["weights"]) <= TOL
