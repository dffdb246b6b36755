"""Shared harness for distributed parity tests: tiny models, data, and a training loop.

Every case trains the same model from the same seed on the same per-rank data; the
reference is plain ``DistributedDataParallel`` built by hand (not through shardcompat), so
a bug in the adapter layer cannot hide in the reference.  Cases run many configurations in
one process group (one spawn per test module) because starting ranks is the slow part.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from shardcompat.launch import spawn

FP32_TOL = 1e-5  # max abs diff of losses and final parameters against plain DDP, fp32
STEPS = 4
BATCH = 8  # per rank
DIM = 16
VOCAB = 32
SEQ = 8


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(DIM, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    """A pre-norm transformer block (self-attention + MLP)."""

    def __init__(self, dim: int = DIM, heads: int = 2) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        # bias=False: the key bias has an identically zero gradient (softmax ignores it), and
        # AdamW turns the rounding noise there into +-lr steps that differ with reduction order.
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, bias=False)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class BlockModel(nn.Module):
    """Embedding, two transformer blocks and a head: the smallest thing auto_wrap can split."""

    _no_split_modules: ClassVar[list[str]] = ["Block"]  # as Hugging Face models declare it

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


class TiedModel(BlockModel):
    """The BlockModel with its head tied to the embedding, as GPT-2's lm_head is."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight


MODELS: dict[str, Callable[[], nn.Module]] = {"mlp": MLP, "blocks": BlockModel}
TIED: dict[str, Callable[[], nn.Module]] = {"tied": TiedModel}  # not in every matrix: tests ask for it
def two_groups(params: Any) -> torch.optim.Optimizer:
    """AdamW with two parameter groups, as the Hugging Face Trainer builds it: weight decay on
    the matrices, none on biases and norms, which also get their own learning rate."""
    params = list(params)
    return torch.optim.AdamW([
        {"params": [p for p in params if p.dim() > 1], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0, "lr": 3e-3},
    ], lr=1e-2)


def hf_adafactor(params: Any) -> torch.optim.Optimizer:
    """Transformers' Adafactor as ``--optim adafactor`` builds it (fixed learning rate)."""
    from transformers.optimization import Adafactor

    optimizer: torch.optim.Optimizer = Adafactor(params, lr=1e-2, scale_parameter=False, relative_step=False,
                                                 warmup_init=False)
    return optimizer


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9),
    "adamw": functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.01),
    "groups": two_groups,  # on backends whose optimizer sees the model's own parameters
    # the matrices only: the biases and norms are left out (frozen by the optimizer, not by requires_grad)
    "matrices": lambda params: torch.optim.SGD([p for p in params if p.dim() > 1], lr=0.05, momentum=0.9),
    "adagrad": functools.partial(torch.optim.Adagrad, lr=0.05),
    "adafactor": functools.partial(torch.optim.Adafactor, lr=1e-2),
    "hf-adafactor": hf_adafactor,
}


def build_model(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return {**MODELS, **TIED}[name]()


def batch(model: str, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch at ``step``: different on every rank, the same in every run."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    if model in ("blocks", "tied"):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
        return tokens[:, :-1], tokens[:, 1:]
    x = torch.randn(BATCH, DIM, generator=gen)
    return x, torch.sin(x)


def loss_fn(model: str, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if model in ("blocks", "tied"):
        return nn.functional.cross_entropy(out.reshape(-1, VOCAB).float(), target.reshape(-1))
    return nn.functional.mse_loss(out.float(), target)


@dataclass(frozen=True)
class Case:
    """One training run. ``options=None`` is the hand-built plain DDP reference."""

    options: str | None
    backend: str = "auto"
    model: str = "mlp"
    optimizer: str = "sgd"
    steps: int = STEPS
    clip: float | None = None
    accumulate: int = 1
    local_world_size: int | None = None  # what torchrun would set: 2 on a 4-rank job = 2 "nodes"

    @property
    def reference(self) -> Case:
        return Case(None, model=self.model, optimizer=self.optimizer, steps=self.steps,
                    clip=self.clip, accumulate=self.accumulate)


@dataclass
class Result:
    losses: list[float]
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    backend: str = ""
    info: dict[str, Any] = field(default_factory=dict)


def _global_mean(value: torch.Tensor) -> float:
    value = value.detach().float().clone()
    dist.all_reduce(value)
    return float(value) / dist.get_world_size()


class _Reference:
    """Plain DDP with the same loop surface as ``Prepared``."""

    def __init__(self, model: nn.Module, optimizer: str, device: torch.device) -> None:
        self.module = model.to(device)
        ids = [device.index] if device.type == "cuda" else None
        self.model = nn.parallel.DistributedDataParallel(self.module, device_ids=ids)
        self.optimizer = OPTIMIZERS[optimizer](self.model.parameters())
        self.backend = "reference-ddp"

    def __call__(self, *args: Any) -> torch.Tensor:
        return self.model(*args)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def no_sync(self) -> Any:
        return self.model.no_sync()

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        return nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}


def _device() -> torch.device:
    """This rank's device: its GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sharded_units(model: nn.Module) -> int:
    """FSDP1 instances plus ``fully_shard``-ed modules, found by torch's own classes."""
    from torch.distributed import fsdp

    kinds = tuple(k for k in (fsdp.FullyShardedDataParallel, getattr(fsdp, "FSDPModule", None)) if k)
    return sum(isinstance(m, kinds) for m in model.modules())


def _prepare(case: Case, model: nn.Module, prepare_kwargs: dict[str, Any] | None) -> Any:
    import shardcompat

    saved = os.environ.get("LOCAL_WORLD_SIZE")
    if case.local_world_size is not None:
        os.environ["LOCAL_WORLD_SIZE"] = str(case.local_world_size)
    try:
        return shardcompat.prepare(model, OPTIMIZERS[case.optimizer], case.options,
                                   backend=case.backend, **(prepare_kwargs or {}))
    finally:
        if saved is not None:
            os.environ["LOCAL_WORLD_SIZE"] = saved


def train(case: Case, rank: int, prepare_kwargs: dict[str, Any] | None = None) -> Result:
    """Run ``case`` on this rank; every rank must call it. State is returned on rank 0."""
    model = build_model(case.model)
    device = _device()
    if case.options is None:
        runner: Any = _Reference(model, case.optimizer, device)
    else:
        runner = _prepare(case, model, prepare_kwargs)
    losses: list[float] = []
    norms: list[float] = []
    for step in range(case.steps):
        total = torch.zeros((), device=device)
        for micro in range(case.accumulate):
            x, y = (t.to(device) for t in batch(case.model, rank, step * case.accumulate + micro))
            last = micro == case.accumulate - 1
            ctx = runner.no_sync() if not last else _nullcontext()
            with ctx:
                loss = loss_fn(case.model, runner(x), y) / case.accumulate
                runner.backward(loss)
            total += loss.detach().float()
        if case.clip is not None:
            norms.append(float(runner.clip_grad_norm_(case.clip)))
        runner.step()
        runner.zero_grad()
        losses.append(_global_mean(total))
    state = runner.full_state_dict()
    info = {
        "norms": norms,
        "units": sharded_units(runner.model),
        "scaler": type(getattr(runner, "scaler", None)).__name__,
        "call": getattr(getattr(runner, "plan", None), "call", ""),
        # the settings of each group of the optimizer that steps this rank's parameters
        "groups": [{k: g[k] for k in ("lr", "weight_decay") if k in g}
                   for g in getattr(runner.optimizer, "optim", runner.optimizer).param_groups],
    }
    return Result(losses, state if rank == 0 else {}, runner.backend, info)


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _run_cases(rank: int, world_size: int, cases: Sequence[Case]) -> list[Result | str]:
    """Runs on every rank; a case that raises is reported as its error text, not a crash."""
    out: list[Result | str] = []
    for case in cases:
        try:
            out.append(train(case, rank))
        except Exception as error:  # reported per case so one failure doesn't hide the rest
            out.append(f"{type(error).__name__}: {error}")
            dist.barrier()
    return out


def run_cases(cases: Sequence[Case], nprocs: int = 2, timeout: float = 600.0,
              backend: str = "gloo") -> dict[Case, Result | str]:
    """Train every case (and its DDP reference) in one process group; rank 0's results.

    ``backend="nccl"`` trains on each rank's GPU (the same code, for ``gpu`` tests)."""
    every = list(dict.fromkeys([c for case in cases for c in (case.reference, case)]))
    results = spawn(_run_cases, nprocs, (every,), timeout=timeout, backend=backend)[0]
    return dict(zip(every, results))


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), f"parameter names differ: {sorted(a.keys() ^ b.keys())}"
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def ddp_diff(results: dict[Case, Result | str], case: Case) -> tuple[float, float]:
    """``(max loss diff, max final parameter diff)`` of ``case`` against its DDP reference."""
    got, want = results[case], results[case.reference]
    assert isinstance(got, Result), f"{case} failed: {got}"
    assert isinstance(want, Result), f"reference for {case} failed: {want}"
    assert len(got.losses) == len(want.losses) and all(math.isfinite(x) for x in got.losses), got.losses
    loss_diff = max(abs(a - b) for a, b in zip(got.losses, want.losses))
    return loss_diff, max_diff(got.state, want.state)


def assert_matches_ddp(results: dict[Case, Result | str], case: Case, tol: float = FP32_TOL) -> Result:
    """Losses, clip norms and final full parameters of ``case`` match its plain-DDP reference
    within ``tol`` (max abs diff)."""
    loss_diff, param_diff = ddp_diff(results, case)
    got, want = results[case], results[case.reference]
    assert isinstance(got, Result) and isinstance(want, Result)
    assert loss_diff <= tol, f"{case}: losses {got.losses} vs DDP {want.losses} (diff {loss_diff})"
    assert param_diff <= tol, f"{case}: final parameters differ from DDP by {param_diff}"
    got_norms, want_norms = got.info.get("norms", []), want.info.get("norms", [])
    assert len(got_norms) == len(want_norms), f"{case}: {len(got_norms)} clip norms vs {len(want_norms)}"
    for a, b in zip(got_norms, want_norms):
        assert abs(a - b) <= tol * max(1.0, abs(b)), f"{case}: clip norms {got_norms} vs DDP {want_norms}"
    assert want.losses[-1] < want.losses[0], "the reference did not learn; the test would prove nothing"
    return got


def matrix(options: Sequence[str], backend: str, **fields: Any) -> list[Case]:
    """Every option string on ``backend`` with each model and each one-group optimizer."""
    return [Case(o, backend, model=m, optimizer=opt, **fields)
            for o in options for m in MODELS for opt in ("sgd", "adamw")]


def case_id(case: Case) -> str:
    extra = [f"{k}={getattr(case, k)}" for k in ("clip", "accumulate") if getattr(case, k) not in (None, 1)]
    return "-".join([case.backend, repr(case.options or ""), case.model, case.optimizer, *extra])


BF16_TOL = 5e-2  # bf16 (8-bit mantissa) against fp32 DDP over STEPS steps: loose, but it must differ
FP16_TOL = 1e-2  # fp16 (11-bit mantissa) with a grad scaler against fp32 DDP


def state_phases(backend: str, options: str, rank: int) -> dict[str, dict[str, float]]:
    """``Prepared.local_tensors()`` counted (unique storages) after forward, backward and the
    optimizer step of a second step on the BlockModel with AdamW, in units of 4Ψ."""
    import shardcompat
    from shardcompat.memory import count_state

    torch.manual_seed(0)
    model = BlockModel()
    full = 4 * sum(p.numel() for p in model.parameters())
    prepared = shardcompat.prepare(model, lambda ps: torch.optim.AdamW(ps, lr=1e-3), options, backend=backend)
    seen: dict[str, dict[str, float]] = {}

    def snap(phase: str) -> None:
        state = count_state(prepared.local_tensors())
        seen[phase] = {"params": state.params / full, "grads": state.grads / full, "optim": state.optim / full}

    for step in range(2):
        tokens = torch.randint(0, VOCAB, (4, 8), generator=torch.Generator().manual_seed(10 * step + rank))
        loss = prepared(tokens).float().pow(2).mean()
        snap("forward")
        prepared.backward(loss)
        snap("backward")
        prepared.step()
        snap("step")
        prepared.zero_grad()
    return seen
