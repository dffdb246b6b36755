"""Checkpoints move between backends and world sizes and resume training where it stopped.

How the comparison works across world sizes: every step has one *global* batch of
``GLOBAL`` examples, split into equal contiguous slices, one per rank.  With a mean loss and
equal slices, the averaged gradient is the gradient of the global mean loss whatever the
world size, so training is the same computation on 2 ranks and on 4; only the order of the
floating-point reductions differs.  Hence:

* the reference is one uninterrupted run of ``K + M`` steps (plain DDP built by hand, 2 ranks);
* every backend trains ``K`` steps on 2 ranks and saves (full format, and sharded where the
  backend can write it);
* every backend resumes every checkpoint on 4 ranks, trains ``M`` steps, and must match the
  reference's last ``M`` losses within ``CROSS_TOL`` (fp32, reduction order only);
* the same backend on the same world size, resuming from its own checkpoint (into a model
  built from a *different* seed, so nothing survives by accident), must reproduce its own
  uninterrupted losses and final parameters bit for bit, and the RNG streams continue.

All of it runs in two spawns (2 ranks, then 4) because starting ranks is the slow part;
between them the test process consolidates a sharded checkpoint and damages copies.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import itertools
import random
import re
import shutil
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from torch import nn

from shardcompat.backends import get
from shardcompat.checkpoint import CheckpointError, consolidate, load_rng_state, read_manifest
from shardcompat.launch import spawn
from tests._parity import DIM, MLP, build_model, two_groups

pytestmark = pytest.mark.slow

K, M = 3, 2  # steps before the save, steps after the resume
GLOBAL = 16  # examples per step, split over the ranks
CROSS_TOL = 1e-5  # max abs loss diff after a change of backend and/or world size (fp32)
SAVED_ON, RESUMED_ON = 2, 4

# Every CPU-capable backend with an option string it serves; unavailable ones skip by probe.
BACKENDS = {
    "torch-zero": "zero_dp_1",
    "torch-fsdp1": "zero_dp_2",
    "torch-fsdp2": "zero_dp_3",
    "fairscale-sdp": "zero_dp_1",
    "fairscale-fsdp": "zero_dp_3",  # on CPU through shardcompat's compatibility layer
}


def _probe_reason(name: str) -> str:
    try:
        probe = get(name).probe()
    except Exception as error:  # a backend module not landed / broken import
        return f"{type(error).__name__}: {error}"
    return "" if probe else probe.reason


UNAVAILABLE = {name: why for name in BACKENDS if (why := _probe_reason(name))}
AVAILABLE = [name for name in BACKENDS if name not in UNAVAILABLE]
SHARDED_WRITERS = ("torch-fsdp1", "torch-fsdp2")  # DCP-capable; the others must refuse
ADAMW = functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.01)
# Checkpoints of a two-group optimizer (weight decay and lr per group): full, and sharded.
GROUPED = {"torch-zero": "groups-full", "torch-fsdp2": "groups-sharded"}
# Backends that show the factory the model's parameters with their shapes.  (FSDP1 keeps the
# groups too, but its parameters are 1-D shards there, which ``two_groups`` cannot tell apart
# by dimension; the Trainer tests group them by name.)
KEEP_GROUPS = ("torch-zero", "torch-fsdp2", "fairscale-sdp")


def _reversed_groups(params: Any) -> torch.optim.Optimizer:
    """The same two groups as ``two_groups``, the other way round."""
    built = two_groups(params)
    return torch.optim.AdamW(built.param_groups[::-1], lr=1e-2)


def _three_groups(params: Any) -> torch.optim.Optimizer:
    """``two_groups`` with its weight-decay group split in two (the same settings)."""
    decayed, plain = two_groups(params).param_groups
    first, rest = decayed["params"][:1], decayed["params"][1:]
    return torch.optim.AdamW([{**decayed, "params": first}, {**decayed, "params": rest}, plain], lr=1e-2)


def _without_last_bias(params: Any) -> torch.optim.Optimizer:
    return ADAMW(list(params)[:-1])


def _adafactor(params: Any) -> torch.optim.Optimizer:
    """Transformers' Adafactor with every state it keeps: factored statistics, the parameter
    RMS (scale_parameter) and a first moment (beta1); a fixed lr, which the scheduler steps."""
    from transformers.optimization import Adafactor

    built: torch.optim.Optimizer = Adafactor(params, lr=1e-2, relative_step=False, scale_parameter=True,
                                             warmup_init=False, beta1=0.9)
    return built


FACTORIES = {"two": two_groups, "reversed": _reversed_groups, "three": _three_groups, "adafactor": _adafactor}
# Adafactor's state, saved on 2 ranks as DTensor shards (FSDP2) and whole (ZeRO), resumed on 4
# by both: the row and column statistics are gathered whole and resharded by the loader.
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
ADAFACTOR_SAVES = {"adafactor-fsdp2-full": "torch-fsdp2", "adafactor-fsdp2-sharded": "torch-fsdp2",
                   "adafactor-zero-full": "torch-zero"}
ADAFACTOR_RESUMERS = ("torch-zero", "torch-fsdp2")
ADAFACTOR_SOURCES = [*ADAFACTOR_SAVES, "adafactor-consolidated"]  # the last: consolidate() of the sharded one
# label: (backend, optimizer factory) the good checkpoint of another grouping is refused by
GROUP_REFUSALS = {
    "wrong-groups-merged": ("torch-zero", ADAMW),  # one group: both saved groups' settings
    "wrong-groups-sharded": ("torch-fsdp2", ADAMW),  # the same, through DCP
    "wrong-groups-lost": ("torch-zero", _without_last_bias),  # saved state nowhere to go
}


def _batch(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7919 * step + 1)
    x = torch.randn(GLOBAL, DIM, generator=gen)
    per = GLOBAL // world
    part = x[rank * per : (rank + 1) * per]
    return part, torch.sin(part)


class _DDP:
    """The reference: plain DDP built by hand, the same loop surface as ``Prepared``."""

    def __init__(self, model: nn.Module, optimizer: Any = ADAMW) -> None:
        self.model = nn.parallel.DistributedDataParallel(model)
        self.optimizer = optimizer(self.model.parameters())

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()


def _scheduler(optimizer: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)


def _train(runner: Any, scheduler: Any, start: int, stop: int) -> list[float]:
    rank, world = dist.get_rank(), dist.get_world_size()
    losses = []
    for step in range(start, stop):
        x, y = _batch(step, rank, world)
        loss = nn.functional.mse_loss(runner.model(x), y)
        runner.backward(loss)
        runner.step()
        runner.zero_grad()
        scheduler.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / world)
    return losses


def _prepare(name: str, seed: int = 0, model: nn.Module | None = None, optimizer: Any = ADAMW) -> Any:
    import shardcompat

    module = model if model is not None else build_model("mlp", seed)
    prepared = shardcompat.prepare(module, optimizer, BACKENDS[name], backend=name)
    return prepared, _scheduler(prepared.optimizer)


def _rng_probe() -> tuple[list[float], float, float]:
    import numpy

    return torch.rand(3).tolist(), random.random(), float(numpy.random.rand())


def _seed(seed: int) -> None:
    import numpy

    torch.manual_seed(seed)
    random.seed(seed)
    numpy.random.seed(seed)


def _rng_later(name: str, path: Path) -> dict[str, Any]:
    """``restore_rng=False`` leaves the random states alone; ``load_rng_state`` restores them."""
    prepared, scheduler = _prepare(name, seed=1)
    _seed(99)
    prepared.load_checkpoint(path, scheduler=scheduler, restore_rng=False)
    after_load = _rng_probe()
    _seed(99)
    untouched = after_load == _rng_probe()
    loaded = load_rng_state(path)
    return {"untouched": untouched, "loaded": loaded, "probe": _rng_probe()}


def _error(fn: Any) -> str:
    try:
        fn()
    except CheckpointError as error:
        return str(error)
    return "(no error)"


# ------------------------------------------------------------------ phase 1: 2 ranks
def _phase_save(rank: int, world: int, root: str, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    torch.manual_seed(0)
    ref = _DDP(build_model("mlp", 0))
    out["reference"] = _train(ref, _scheduler(ref.optimizer), 0, K + M)
    for name in names:
        full, sharded = Path(root, f"{name}-full"), Path(root, f"{name}-sharded")
        prepared, scheduler = _prepare(name)
        res: dict[str, Any] = {"head": _train(prepared, scheduler, 0, K)}
        prepared.save_checkpoint(full, scheduler=scheduler, note=name)
        if name in SHARDED_WRITERS:
            prepared.save_checkpoint(sharded, sharded=True, scheduler=scheduler, note=name)
        else:
            res["sharded_refusal"] = _error(functools.partial(prepared.save_checkpoint, sharded, sharded=True))
        if name == names[0]:
            res["crash"] = _simulated_crash(prepared, scheduler, full)
        res["probe"] = _rng_probe()
        res["tail"] = _train(prepared, scheduler, K, K + M)
        res["final"] = prepared.full_state_dict()
        for kind, path in (("full", full), ("sharded", sharded)):
            if not path.exists():
                continue
            again, again_sched = _prepare(name, seed=1)  # different weights before loading
            info = again.load_checkpoint(path, scheduler=again_sched)
            res[f"resumed_{kind}"] = {
                "info": info,
                "probe": _rng_probe(),
                "tail": _train(again, again_sched, K, K + M),
                "final": again.full_state_dict(),
                "lr": again_sched.get_last_lr(),
            }
            res[f"rng_later_{kind}"] = _rng_later(name, path)
        res["lr"] = scheduler.get_last_lr()
        out[name] = res
    ref = _DDP(build_model("mlp", 0), two_groups)
    out["reference_groups"] = _train(ref, _scheduler(ref.optimizer), 0, K + M)
    out["reference_group_settings"] = _settings(ref.optimizer)
    for name in (n for n in GROUPED if n in names):
        prepared, scheduler = _prepare(name, optimizer=two_groups)
        _train(prepared, scheduler, 0, K)
        prepared.save_checkpoint(Path(root, GROUPED[name]), sharded=name in SHARDED_WRITERS, scheduler=scheduler)
    if HAS_TRANSFORMERS:
        ref = _DDP(build_model("mlp", 0), _adafactor)
        out["reference_adafactor"] = _train(ref, _scheduler(ref.optimizer), 0, K + M)
        for source, name in ADAFACTOR_SAVES.items():
            prepared, scheduler = _prepare(name, optimizer=_adafactor)
            out[source] = _train(prepared, scheduler, 0, K)
            prepared.save_checkpoint(Path(root, source), sharded="sharded" in source, scheduler=scheduler)
    return out


def _settings(optimizer: torch.optim.Optimizer) -> list[tuple[float, float]]:
    return [(group["lr"], group["weight_decay"]) for group in optimizer.param_groups]


def _simulated_crash(prepared: Any, scheduler: Any, path: Path) -> str:
    """A write that fails after model.pt: a crash point simulated by making one torch.save
    raise (the real-kill cases are in test_atomic).  The previous checkpoint must survive."""
    real = torch.save

    def failing(obj: Any, file: Any, *args: Any, **kwargs: Any) -> None:
        if str(file).endswith("optimizer.pt"):
            raise OSError(28, "No space left on device (simulated)")
        real(obj, file, *args, **kwargs)

    with mock.patch.object(torch, "save", failing):
        return _error(lambda: prepared.save_checkpoint(path, step=999, scheduler=scheduler))


# ------------------------------------------------------------------ phase 2: 4 ranks
def _phase_resume(
    rank: int, world: int, root: str, sources: list[str], names: list[str], bad: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for source, name in itertools.product(sources, names):
        prepared, scheduler = _prepare(name, seed=1)
        info = prepared.load_checkpoint(Path(root, source), scheduler=scheduler)
        out[(source, name)] = {"info": info, "tail": _train(prepared, scheduler, K, K + M)}
    for source, name, factory in _group_resumes(names):
        prepared, scheduler = _prepare(name, seed=1, optimizer=FACTORIES[factory])
        prepared.load_checkpoint(Path(root, source), scheduler=scheduler)
        tail = _train(prepared, scheduler, K, K + M)
        out[(source, name, factory)] = {"tail": tail, "settings": _settings(prepared.optimizer)}
    for source, name in itertools.product(ADAFACTOR_SOURCES if HAS_TRANSFORMERS else (), ADAFACTOR_RESUMERS):
        prepared, scheduler = _prepare(name, seed=1, optimizer=_adafactor)
        prepared.load_checkpoint(Path(root, source), scheduler=scheduler)
        out[(source, name)] = {"tail": _train(prepared, scheduler, K, K + M)}
    for label, path in bad.items():  # refusals, model left untouched
        model = _WideMLP() if label == "wrong-shape" else build_model("blocks") if label == "wrong-model" else None
        optimizer = functools.partial(torch.optim.SGD, lr=0.1) if label == "wrong-optimizer" else ADAMW
        target, optimizer = GROUP_REFUSALS.get(label, (names[-1], optimizer))
        prepared, _ = _prepare(target, seed=1, model=model, optimizer=optimizer)
        before = prepared.full_state_dict()
        message = _error(lambda path=path, prepared=prepared: prepared.load_checkpoint(path))
        after = prepared.full_state_dict()
        unchanged = all(torch.equal(before[k], after[k]) for k in before)
        out[label] = {"message": message, "unchanged": unchanged, "step": prepared.step_count}
    out["rng_loaded"] = load_rng_state(Path(root, sources[0]))  # saved by 2 ranks, loaded on 4
    return out


def _group_resumes(names: list[str]) -> list[tuple[str, str, str]]:
    """(checkpoint, backend, factory): two-group checkpoints on every backend that keeps the
    groups, a one-group one into two groups, and two groups into other numbers and orders."""
    two = [(GROUPED[saver], name, "two") for saver in GROUPED for name in names if name in KEEP_GROUPS]
    return [*two, ("torch-zero-full", "torch-fsdp2", "two"), ("groups-full", "torch-fsdp2", "reversed"),
            ("groups-sharded", "torch-zero", "three"), ("groups-sharded", "torch-fsdp2", "three")]


class _WideMLP(MLP):
    """The MLP's names with another hidden width: every name matches, shapes do not."""

    def __init__(self) -> None:
        super().__init__()
        self.net[2] = nn.Linear(32, 24)
        self.net[4] = nn.Linear(24, DIM)


# ------------------------------------------------------------------ the runs
@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if len(AVAILABLE) < 2:
        pytest.skip(f"fewer than two backends can run here: {UNAVAILABLE}")
    root = tmp_path_factory.mktemp("checkpoints")
    saved = spawn(_phase_save, SAVED_ON, (str(root), AVAILABLE), timeout=240)
    sharded = [n for n in AVAILABLE if n in SHARDED_WRITERS]
    consolidate(root / f"{sharded[0]}-sharded", root / "consolidated")
    if HAS_TRANSFORMERS:
        consolidate(root / "adafactor-fsdp2-sharded", root / "adafactor-consolidated")
    bad = _damage(root, AVAILABLE[0], sharded[0])
    sources = [f"{n}-full" for n in AVAILABLE] + [f"{n}-sharded" for n in sharded] + ["consolidated"]
    resumed = spawn(_phase_resume, RESUMED_ON, (str(root), sources, AVAILABLE, bad), timeout=300)
    return {"root": root, "saved": saved, "resumed": resumed[0], "sharded": sharded, "bad": bad,
            "rng_loaded": [rank["rng_loaded"] for rank in resumed]}


def _damage(root: Path, full_of: str, sharded_of: str) -> dict[str, str]:
    """Damaged copies of good checkpoints, and good ones for the wrong model/optimizer."""
    full, sharded = root / f"{full_of}-full", root / f"{sharded_of}-sharded"
    cases: dict[str, str] = {}

    def copy(label: str, src: Path) -> Path:
        dst = root / f"bad-{label}"
        shutil.copytree(src, dst)
        cases[label] = str(dst)
        return dst

    model = copy("truncated", full) / "model.pt"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    optim = copy("flipped", full) / "optimizer.pt"
    data = bytearray(optim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    optim.write_bytes(bytes(data))
    (copy("missing-shard", sharded) / "__1_0.distcp").unlink()
    for label in ("wrong-model", "wrong-shape", "wrong-optimizer"):
        cases[label] = str(full)
    for label, source in zip(GROUP_REFUSALS, ("groups-full", "groups-sharded", "torch-zero-full")):
        cases[label] = str(root / source)
    return cases


def _pairs() -> list[Any]:
    return [
        pytest.param(a, b, id=f"{a}->{b}", marks=_skip_unavailable(a, b))
        for a, b in itertools.product(BACKENDS, BACKENDS)
    ]


def _skip_unavailable(*names: str) -> list[Any]:
    missing = [f"{n}: {UNAVAILABLE[n]}" for n in names if n in UNAVAILABLE]
    return [pytest.mark.skip(reason="; ".join(missing))] if missing else []


def _assert_close(got: list[float], want: list[float], what: str) -> None:
    diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert diff <= CROSS_TOL, f"{what}: losses {got} vs uninterrupted {want} (diff {diff:.3g})"


# ------------------------------------------------------------------ the tests
def test_backends_train_like_the_reference(runs: dict[str, Any]) -> None:
    """Sanity of the setup: every backend's first K steps are the reference's, and it learns."""
    saved = runs["saved"][0]
    ref = saved["reference"]
    assert ref[-1] < ref[0], "the reference did not learn; the test would prove nothing"
    for name in AVAILABLE:
        _assert_close(saved[name]["head"] + saved[name]["tail"], ref, f"{name} uninterrupted")


@pytest.mark.parametrize(("saved_by", "resumed_by"), _pairs())
def test_full_checkpoint_moves_between_backends_and_world_sizes(
    runs: dict[str, Any], saved_by: str, resumed_by: str
) -> None:
    """Saved on 2 ranks by one backend, resumed on 4 by another: the same losses (CROSS_TOL)."""
    got = runs["resumed"][(f"{saved_by}-full", resumed_by)]
    assert got["info"] == {"step": K, "note": saved_by}
    _assert_close(got["tail"], runs["saved"][0]["reference"][K:], f"{saved_by} -> {resumed_by}")


@pytest.mark.parametrize("resumed_by", [pytest.param(b, marks=_skip_unavailable(b)) for b in BACKENDS])
def test_sharded_checkpoint_resumes_on_any_backend(runs: dict[str, Any], resumed_by: str) -> None:
    """DCP shards from 2 ranks, resharded onto 4 (or read whole by ZeRO/fairscale)."""
    for source in [f"{n}-sharded" for n in runs["sharded"]] + ["consolidated"]:
        got = runs["resumed"][(source, resumed_by)]
        assert got["info"]["step"] == K
        _assert_close(got["tail"], runs["saved"][0]["reference"][K:], f"{source} -> {resumed_by}")


@pytest.mark.parametrize("resumed_by", [pytest.param(b, marks=_skip_unavailable(b)) for b in KEEP_GROUPS])
def test_two_parameter_groups_resume_on_every_backend_that_keeps_them(runs: dict[str, Any], resumed_by: str) -> None:
    """Weight decay and lr per group, saved full by ZeRO and sharded by FSDP2, resumed on 4 ranks."""
    saved = runs["saved"][0]
    for source in GROUPED.values():
        got = runs["resumed"][(source, resumed_by, "two")]
        _assert_close(got["tail"], saved["reference_groups"][K:], f"{source} -> {resumed_by}")
        assert got["settings"] == saved["reference_group_settings"], f"{source} -> {resumed_by}"


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="Transformers' Adafactor: transformers is not installed")
@pytest.mark.parametrize("source", ADAFACTOR_SOURCES)
def test_adafactor_state_moves_between_backends_and_world_sizes(runs: dict[str, Any], source: str) -> None:
    """Factored statistics, RMS and first moment: saved on 2 ranks (full, sharded, and the
    sharded one consolidated), resumed on 4 by FSDP2's DTensor shards and by ZeRO's whole
    parameters, as the uninterrupted DDP run continues."""
    saved = runs["saved"][0]
    want = saved["reference_adafactor"]
    assert want[-1] < want[0], "the reference did not learn; the test would prove nothing"
    if source in saved:
        _assert_close(saved[source], want[:K], f"{source} before the save")
    for name in ADAFACTOR_RESUMERS:
        _assert_close(runs["resumed"][(source, name)]["tail"], want[K:], f"{source} -> {name}")


def test_parameter_groups_are_matched_by_the_names_they_hold(runs: dict[str, Any]) -> None:
    """Other numbers and orders of groups resume where every group can take its saved settings."""
    saved, resumed = runs["saved"][0], runs["resumed"]
    decayed, plain = saved["reference_group_settings"]
    for key, settings in (
        (("groups-full", "torch-fsdp2", "reversed"), [plain, decayed]),
        (("groups-sharded", "torch-zero", "three"), [decayed, decayed, plain]),
        (("groups-sharded", "torch-fsdp2", "three"), [decayed, decayed, plain]),
    ):
        _assert_close(resumed[key]["tail"], saved["reference_groups"][K:], str(key))
        assert resumed[key]["settings"] == settings, key
    # one saved group into two: both take its settings, as torch's load_state_dict would
    one_into_two = resumed[("torch-zero-full", "torch-fsdp2", "two")]
    _assert_close(one_into_two["tail"], saved["reference"][K:], "one group into two")
    assert [wd for _, wd in one_into_two["settings"]] == [0.01, 0.01]


@pytest.mark.parametrize("name", [pytest.param(n, marks=_skip_unavailable(n)) for n in BACKENDS])
def test_same_backend_same_world_resumes_exactly(runs: dict[str, Any], name: str) -> None:
    """Resuming at step K reproduces the uninterrupted run bit for bit, RNG streams included."""
    for rank, result in enumerate(runs["saved"]):
        res = result[name]
        kinds = ["full", "sharded"] if name in SHARDED_WRITERS else ["full"]
        for kind in kinds:
            again = res[f"resumed_{kind}"]
            assert again["info"] == {"step": K, "note": name}
            assert again["probe"] == res["probe"], f"rank {rank} {kind}: RNG state not restored"
            assert again["lr"] == res["lr"], f"{kind}: scheduler not restored"
            assert again["tail"] == res["tail"], f"{kind}: {again['tail']} != {res['tail']} (must be exact)"
            later = res[f"rng_later_{kind}"]
            assert later["untouched"], f"rank {rank} {kind}: restore_rng=False changed the random states"
            assert later["loaded"] and later["probe"] == res["probe"], f"rank {rank} {kind}: load_rng_state"
            for key, value in res["final"].items():
                assert torch.equal(value, again["final"][key]), f"{kind}: {key} differs after resume"


def test_load_rng_state_restores_this_ranks_states_from_a_verified_file(runs: dict[str, Any], tmp_path: Path) -> None:
    """Ranks beyond the saved world size keep theirs; a damaged file is refused, naming it."""
    assert runs["rng_loaded"] == [True, True, False, False]
    name = AVAILABLE[0]
    good = runs["root"] / f"{name}-full"
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    rng = bad / "rng" / "rank-00000.pt"
    data = bytearray(rng.read_bytes())
    data[len(data) // 2] ^= 0xFF
    rng.write_bytes(bytes(data))
    import numpy

    with torch.random.fork_rng(devices=[]):  # this process is rank 0 without a process group
        python, numpy_state = random.getstate(), numpy.random.get_state()
        try:
            with pytest.raises(CheckpointError, match=r"rng/rank-00000.pt: sha256 differs"):
                load_rng_state(bad)
            assert load_rng_state(good)
            assert _rng_probe() == runs["saved"][0][name]["probe"]
        finally:
            random.setstate(python)
            numpy.random.set_state(numpy_state)


def test_manifest_describes_the_checkpoint(runs: dict[str, Any]) -> None:
    name = AVAILABLE[0]
    manifest = read_manifest(runs["root"] / f"{name}-full")
    assert manifest["kind"] == "full" and manifest["backend"] == name
    assert manifest["world_size"] == SAVED_ON and manifest["step"] == K
    assert manifest["options"] == BACKENDS[name] and manifest["optimizer"] == "AdamW"
    assert manifest["versions"]["torch"] == importlib.metadata.version("torch")
    assert manifest["model"]["net.0.weight"] == [32, DIM]
    assert {"model.pt", "optimizer.pt", "trainer.pt", "rng/rank-00000.pt", "rng/rank-00001.pt"} <= set(manifest["files"])
    optim = torch.load(runs["root"] / f"{name}-full" / "optimizer.pt", weights_only=True)
    assert set(optim["state"]) == set(manifest["model"]), "optimizer state is not keyed by parameter name"
    sharded = read_manifest(runs["root"] / f"{runs['sharded'][0]}-sharded")
    assert sharded["kind"] == "sharded" and {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= set(sharded["files"])


def test_consolidated_equals_full(runs: dict[str, Any]) -> None:
    """consolidate() of the sharded checkpoint gives the tensors the full save wrote."""
    name, root = runs["sharded"][0], runs["root"]
    assert read_manifest(root / "consolidated")["kind"] == "full"
    for file in ("model.pt", "optimizer.pt"):
        a = torch.load(root / "consolidated" / file, weights_only=True)
        b = torch.load(root / f"{name}-full" / file, weights_only=True)
        flat_a, flat_b = _flatten(a), _flatten(b)
        assert flat_a.keys() == flat_b.keys()
        for key in flat_a:
            assert torch.equal(torch.as_tensor(flat_a[key]), torch.as_tensor(flat_b[key])), key


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, val in tree.items() for k, v in _flatten(val, f"{prefix}{key}.").items()}
    if isinstance(tree, list):
        return {k: v for i, val in enumerate(tree) for k, v in _flatten(val, f"{prefix}{i}.").items()}
    return {prefix: tree} if isinstance(tree, (torch.Tensor, int, float)) and not isinstance(tree, bool) else {}


def test_consolidate_refuses_full_and_damaged(runs: dict[str, Any], tmp_path: Path) -> None:
    root = runs["root"]
    with pytest.raises(CheckpointError, match="already a full checkpoint"):
        consolidate(root / f"{AVAILABLE[0]}-full", tmp_path / "x")
    with pytest.raises(CheckpointError, match=r"__1_0.distcp: missing"):
        consolidate(runs["bad"]["missing-shard"], tmp_path / "y")
    assert not (tmp_path / "y").exists()


def test_failed_save_keeps_previous_checkpoint(runs: dict[str, Any]) -> None:
    name = AVAILABLE[0]
    message = runs["saved"][0][name]["crash"]
    assert "No space left on device (simulated)" in message, message
    assert runs["saved"][1][name]["crash"].startswith("on rank 0:"), "rank 1 did not hear of it"
    manifest = read_manifest(runs["root"] / f"{name}-full")  # verifies every checksum
    assert manifest["step"] == K, "the failed save replaced the checkpoint"
    assert not list((runs["root"] / f"{name}-full").glob(".shardcompat-*")), "the failed save left temporaries"


def test_backends_without_dcp_refuse_sharded_with_the_alternative(runs: dict[str, Any]) -> None:
    refusers = [n for n in AVAILABLE if n not in SHARDED_WRITERS]
    for name in refusers:
        message = runs["saved"][0][name]["sharded_refusal"]
        assert f"{name} cannot write a sharded checkpoint" in message, message
        assert "sharded=False" in message and "torch-fsdp2" in message, message
        assert not (runs["root"] / f"{name}-sharded").exists()


_MERGED = (
    "the optimizer's parameter groups do not match the checkpoint's: this optimizer's group 0 holds "
    "'net.0.weight' and 'net.0.bias', which the checkpoint keeps in groups with different settings "
    "(initial_lr 0.01 vs 0.003, lr "
)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("truncated", r"model.pt: \d+ bytes, the manifest says \d+ \(truncated\?\)"),
        ("flipped", "optimizer.pt: sha256 differs from the manifest (corrupted)"),
        ("missing-shard", "__1_0.distcp: missing"),
        ("wrong-model", "missing from the checkpoint: blocks.0.attn.in_proj_weight"),
        ("wrong-shape", "net.2.weight: checkpoint (32, 32), model (24, 32)"),
        ("wrong-optimizer", "the checkpoint holds AdamW optimizer state, but this optimizer is SGD"),
        ("wrong-groups-merged", _MERGED),
        ("wrong-groups-sharded", _MERGED),
        ("wrong-groups-lost", "the checkpoint's optimizer holds 'net.4.bias', which this optimizer does not"),
    ],
)
def test_damaged_or_mismatched_checkpoint_is_refused(runs: dict[str, Any], label: str, expected: str) -> None:
    """The error says what is wrong, the model is untouched, the files are not modified."""
    got = runs["resumed"][label]
    message = got["message"]
    if label.startswith("wrong"):
        assert expected in message, message
    else:
        assert re.search(expected if label == "truncated" else re.escape(expected), message), message
    if label == "wrong-model":
        assert "not in the model: net.0.bias" in message, message
    if label in ("wrong-groups-merged", "wrong-groups-sharded"):
        assert "weight_decay 0.1 vs 0.0)" in message and "keep them apart" in message, message
    assert got["unchanged"], f"{label}: the model changed although the load was refused"
    assert got["step"] == 0
    if not label.startswith("wrong"):  # damaged copies stay as they were (nothing rewritten)
        with pytest.raises(CheckpointError):
            read_manifest(runs["bad"][label])


def test_cli_consolidate_and_verify(runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``shardcompat checkpoint consolidate SRC DST`` and ``checkpoint verify PATH``, as a user runs them."""
    from shardcompat import cli

    src, dst = runs["root"] / f"{runs['sharded'][0]}-sharded", tmp_path / "full"
    assert cli.main(["checkpoint", "consolidate", str(src), str(dst)]) == 0
    assert cli.main(["checkpoint", "verify", str(dst)]) == 0
    assert f"full checkpoint, step {K}" in capsys.readouterr().out
    assert cli.main(["checkpoint", "verify", str(runs["bad"]["flipped"])]) == 1
    assert "optimizer.pt: sha256 differs" in capsys.readouterr().err
