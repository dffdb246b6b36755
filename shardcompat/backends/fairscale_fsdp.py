"""``fairscale-fsdp``: fairscale ``FullyShardedDataParallel`` (0.3+) for zero_dp_2/3, offload, auto_wrap.

Release differences are probed from the constructor's signature: offload is
``move_params_to_cpu`` (0.3.7+) or ``cpu_offload``; ``compute_device`` exists from 0.3.7;
``fairscale.nn.wrap`` from 0.3.1.  fairscale FSDP needs CUDA as shipped; on CPU the wrapped
model holds :func:`~shardcompat.backends._fairscale_cpu.cpu_compat` for as long as it lives.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

from ..options import Precision, ShardingOptions, Stage
from ..prepared import Prepared
from . import _fairscale_cpu
from ._base import OptimizerFactory, Placement, Plan, Probe, UnsupportedOptions
from ._fairscale_common import _cloned, accepts, grad_scaler, probe_fairscale, shard_clip_grad_norm_
from ._optim import check_groups
from ._wrap_policy import describe_rule, modules_to_wrap, wrap_rule

__all__ = ["BACKEND", "FairscaleFsdp", "FairscaleFsdpPrepared"]

_FSDP = _fairscale_cpu.FSDP_MODULE
_MODULES = (_FSDP,)
_NOT_HERE = ("backward_prefetch", "forward_prefetch", "limit_all_gathers")
T = TypeVar("T")


# Without bucket_cap_mb= fairscale would allocate a 25 MB reduce-scatter bucket whose output
# (1/N of it) the gradient shards are views of, so every rank keeps 25/N MB of "gradients"
# alive whatever the model's size (12.5 MiB on 2 ranks for a 110k-parameter model).  A bucket
# only merges the reductions of several units, and its output is held whole by the shards it
# reduced: any size but the exact sum of the units it happens to merge keeps dead memory.
# So shardcompat asks for none: each unit's flat gradient is reduce-scattered on its own into
# a buffer of exactly its shard's size (what torch FSDP does), never more than the largest flat
# gradient the model has.
_BUCKET_UNSET = 0


def _bucket_note(bucket: int | None) -> str:
    if bucket is None:  # this release has no bucket_cap_mb (and its own bucket)
        return ("gradient shards may be views of fairscale's reduce-scatter bucket and keep it alive: "
                "a model smaller than the bucket pays for all of it")
    if bucket == _BUCKET_UNSET:
        return ("bucket_cap_mb not set: 0, so no reduce-scatter bucket: each unit's gradient is reduce-"
                "scattered into a buffer of exactly its shard's size (fairscale's 25 MB default would keep "
                "25/N MB per rank alive as gradient storage); set bucket_cap_mb= to merge small units' reductions")
    return (f"gradient shards are views of the bucket_cap_mb={bucket} reduce-scatter bucket (1/N of it per "
            "rank) and keep it alive: a model smaller than that pays for all of it")


def _features(mods: dict[str, Any]) -> dict[str, bool]:
    init = mods[_FSDP].FullyShardedDataParallel.__init__
    try:
        import fairscale.nn.wrap  # noqa: F401

        wrap = True
    except ImportError:
        wrap = False
    return {
        "move_params_to_cpu": accepts(init, "move_params_to_cpu"),
        "cpu_offload": accepts(init, "cpu_offload"),
        "compute_device": accepts(init, "compute_device"),
        "compute_dtype": accepts(init, "compute_dtype"),
        "bucket_cap_mb": accepts(init, "bucket_cap_mb"),
        "fp32_reduce_scatter": accepts(init, "fp32_reduce_scatter"),
        "auto_wrap": wrap,
        "cpu_compat": _fairscale_cpu.supported(mods[_FSDP]),
        "state_dict_keeps_params": _state_dict_keeps_params(),
        "offload_fp32": _offload_runs_in_fp32(mods[_FSDP].FullyShardedDataParallel),
    }


def _offload_runs_in_fp32(fsdp: Any) -> bool:
    """fairscale < 0.4 refuses offload without fp16: its constructor holds that error message."""
    consts = getattr(getattr(fsdp.__init__, "__code__", None), "co_consts", ())
    return not any(isinstance(c, str) and "cpu_offload requires mixed_precision=True" in c for c in consts)


@functools.cache
def _state_dict_keeps_params() -> bool:
    """Whether a full ``state_dict()`` leaves the flat parameters in place.

    fairscale 0.3.0's ``FlattenParamsWrapper.state_dict`` re-registers a new, unsharded
    ``flat_param``, so the optimizer is left holding a parameter the model no longer uses
    (seen: 2e-2 off the uninterrupted run two steps after one ``state_dict()``).  Probed on a
    tiny wrapper (no process group needed), built with ``skip_init``: a default-initialised layer
    would draw from the global RNG, so the first probe in a process (``shardcompat run``'s
    sharding block, ``backend=auto``) would shift every dropout mask after it.
    """
    try:
        from fairscale.nn.misc import FlattenParamsWrapper
    except ImportError:
        return False
    wrapper = FlattenParamsWrapper(torch.nn.utils.skip_init(torch.nn.Linear, 2, 2))  # type: ignore[no-untyped-call]
    before = list(wrapper.parameters())  # the objects, not their ids: a freed id is reused
    wrapper.state_dict()
    after = list(wrapper.parameters())
    return len(before) == len(after) and all(a is b for a, b in zip(before, after))


class FairscaleFsdp:
    name = "fairscale-fsdp"
    serves = frozenset({Stage.ZERO_DP_2, Stage.ZERO_DP_3})

    def probe(self) -> Probe:
        probe = probe_fairscale(self.name, _MODULES, _features)
        version = probe.versions.get("fairscale")
        if not probe and version is not None and f"No module named '{_FSDP}'" in probe.reason:
            return Probe(self.name, False, (
                f"fairscale {version} has no FullyShardedDataParallel (added in 0.3.0); "
                "upgrade (pip install -U 'fairscale>=0.3.7') or use torch-fsdp1/torch-fsdp2"
            ), probe.versions)
        if probe and not probe.features["state_dict_keeps_params"]:
            # Refused here, not at the first save: hours of training would be lost there.
            return Probe(self.name, False, (
                f"fairscale {version} FSDP re-creates its flat parameters in state_dict(), so the "
                "optimizer goes on stepping parameters the model no longer uses: the first "
                "checkpoint silently breaks training; upgrade (pip install -U 'fairscale>=0.3.7') "
                "or use torch-fsdp1/torch-fsdp2"
            ), probe.versions, probe.features)
        return probe

    def plan(self, options: ShardingOptions, placement: Placement) -> Plan:
        probe = self.probe()
        if not probe:
            raise UnsupportedOptions(self.name, options, probe.reason)
        have = probe.features
        version = probe.versions.get("fairscale")
        if options.stage not in self.serves:
            raise UnsupportedOptions(self.name, options, f"it does not serve {options.stage or 'plain DDP'}",
                                     "use fairscale-sdp for simple/zero_dp_1, torch-fsdp1 for no_shard")
        if options.hybrid:
            raise UnsupportedOptions(self.name, options, "fairscale FSDP has no hybrid sharding",
                                     "use torch-fsdp1 or torch-fsdp2")
        given = [k for k in _NOT_HERE if getattr(options, k) is not None]
        if given:
            raise UnsupportedOptions(self.name, options, f"fairscale FSDP has no {', '.join(given)}",
                                     "drop them or use torch-fsdp1")
        if not placement.cuda and not have["cpu_compat"]:
            raise UnsupportedOptions(self.name, options, f"fairscale {version} FSDP needs CUDA",
                                     "run on a GPU, or use torch-fsdp1/torch-fsdp2 on CPU")
        kwargs: dict[str, Any] = {"reshard_after_forward": options.stage is Stage.ZERO_DP_3}
        notes: list[str] = []
        if options.offload:
            if not have["offload_fp32"] and options.mixed_precision is not Precision.FP16:
                raise UnsupportedOptions(self.name, options,
                                         f"fairscale {version} FSDP offloads only with mixed_precision=fp16",
                                         "add mixed_precision=fp16, upgrade to fairscale>=0.4.0, "
                                         "or use torch-fsdp2 (offload on CPU)")
            kwargs["move_params_to_cpu" if have["move_params_to_cpu"] else "cpu_offload"] = True
        if options.mixed_precision in (Precision.FP16, Precision.BF16):
            kwargs["mixed_precision"] = True
            if options.mixed_precision is Precision.BF16:
                if not have["compute_dtype"]:
                    raise UnsupportedOptions(self.name, options, f"fairscale {version} has no compute_dtype",
                                             "use mixed_precision=fp16 or a newer fairscale")
                kwargs["compute_dtype"] = "torch.bfloat16"
            if placement.world_size == 1 and have["fp32_reduce_scatter"]:
                # Unsharded (one rank), fairscale casts a temporary's .data back to fp32, not the
                # gradient itself: the optimizer would get compute-dtype gradients and fail at
                # its first step.  fp32_reduce_scatter casts param.grad before; nothing to reduce.
                kwargs["fp32_reduce_scatter"] = True
                notes.append("one rank: fp32_reduce_scatter=True, so gradients reach the optimizer in fp32 "
                             "(fairscale leaves them in the compute dtype when it has nothing to reduce)")
        if have["bucket_cap_mb"]:
            kwargs["bucket_cap_mb"] = _BUCKET_UNSET if options.bucket_cap_mb is None else max(1, round(options.bucket_cap_mb))
        if have["compute_device"]:
            kwargs["compute_device"] = f"torch.device({placement.device!r})"
        if options.auto_wrap:
            if not have["auto_wrap"]:
                raise UnsupportedOptions(self.name, options, f"fairscale {version} has no fairscale.nn.wrap",
                                         "upgrade to fairscale>=0.3.1")
            notes.append(f"auto_wrap: wrap {describe_rule(options)} via fairscale.nn.wrap.auto_wrap")
        elif options.stage is Stage.ZERO_DP_3:
            notes.append("without auto_wrap the whole model is the root unit, whose full parameters stay "
                         "gathered from forward until backward (fairscale's disable_reshard_on_root=True); "
                         "add auto_wrap to gather one block at a time")
        notes.append(_bucket_note(kwargs.get("bucket_cap_mb")))
        if not placement.cuda:
            notes.append("CPU: runs through shardcompat's fairscale CPU compatibility layer (no-op streams)")
        call = "FullyShardedDataParallel(model, " + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
        return Plan(self.name, options, call, {"kwargs": kwargs}, tuple(notes), effective_stage=options.zero_stage)

    def wrap(
        self, model: torch.nn.Module, optimizer: OptimizerFactory, plan: Plan, placement: Placement
    ) -> Prepared:
        import importlib

        check_groups(self.name, plan.options, model, optimizer)  # before flattening, as the factory sees them
        module = importlib.import_module(_FSDP)
        kwargs = dict(plan.settings["kwargs"])
        if "compute_dtype" in kwargs:
            kwargs["compute_dtype"] = torch.bfloat16
        if "compute_device" in kwargs:
            kwargs["compute_device"] = torch.device(placement.device)
        kwargs["process_group"] = placement.process_group
        # Offload keeps the fp32 shards in (pinned) host memory and asserts they start there;
        # fairscale moves what it computes with to compute_device itself.
        offload = kwargs.get("move_params_to_cpu") or kwargs.get("cpu_offload")
        model.to("cpu" if offload else placement.device)
        shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}  # before flattening
        with contextlib.nullcontext() if placement.cuda else _fairscale_cpu.cpu_compat(module):
            try:
                wrapped = _build(module.FullyShardedDataParallel, model, plan.options, kwargs)
            except ValueError as error:
                raise UnsupportedOptions(self.name, plan.options, str(error)) from error
            if not placement.cuda:
                _fairscale_cpu.hold(module, wrapped)  # for .model(x) and loss.backward() too
        return FairscaleFsdpPrepared(
            model=wrapped, module=model, optimizer=optimizer(wrapped.parameters()), plan=plan,
            placement=placement, scaler=grad_scaler(plan.options, placement.process_group), shapes=shapes,
        )


def _build(fsdp: Any, model: torch.nn.Module, options: ShardingOptions, kwargs: dict[str, Any]) -> Any:
    if not options.auto_wrap:
        return fsdp(model, **kwargs)
    from fairscale.nn.wrap import auto_wrap, enable_wrap

    chosen = {id(m) for m in modules_to_wrap(model, wrap_rule(model, options))}

    def policy(module: torch.nn.Module, recurse: bool, *args: Any, **more: Any) -> bool:
        return True if recurse else id(module) in chosen

    with enable_wrap(wrapper_cls=fsdp, **kwargs):
        inner = auto_wrap(model, auto_wrap_policy=policy)
    return fsdp(inner, **kwargs)


class FairscaleFsdpPrepared(Prepared):
    """``Prepared`` over fairscale FSDP (on CPU, the model holds the compatibility layer)."""

    def __init__(self, *, shapes: dict[str, tuple[int, ...]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._names = list(shapes)  # the original parameters, in model order
        self._shapes = shapes
        self._owner: dict[str, int] | None = None

    def local_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Each flat parameter and the shard, fp16 and full buffers fairscale keeps on it.

        Between forward and backward (``reshard_after_forward=False``, and the root unit,
        whose reshard fairscale disables) the all-gathered ``_full_param_padded`` is held
        while ``p.data`` may point back at the shard: both count.  With a ``bucket_cap_mb=``
        bucket a gradient shard is a view of the bucket's output and keeps all of it alive,
        which is what is counted.  Freed buffers have size 0 and count nothing.
        """
        params = list(self.model.parameters())
        for param in params:
            yield "param", param
            for name in ("_fp32_shard", "_fp16_shard", "_full_param_padded"):
                buffer = getattr(param, name, None)
                if isinstance(buffer, torch.Tensor):
                    yield "param", buffer
        for param in params:
            for grad in (param.grad, getattr(param, "_saved_grad_shard", None), getattr(param, "_cpu_grad", None)):
                if isinstance(grad, torch.Tensor):
                    yield "grad", grad
        for kind, tensor in super().local_tensors():
            if kind == "optim":
                yield kind, tensor

    def _clip_grad_norm(self, max_norm: float, norm_type: float) -> torch.Tensor:
        # Not FSDP.clip_grad_norm_: it moves the norm to CUDA.  Gradients are disjoint shards.
        return shard_clip_grad_norm_(self.model.parameters(), max_norm, norm_type, self.placement.process_group)

    def _full_state_dict(self, *, rank0_only: bool = True) -> dict[str, torch.Tensor]:
        state = self.model.state_dict()
        if rank0_only and self.placement.rank != 0:
            return {}
        return {k: v.detach().cpu().clone() for k, v in state.items()}

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    # ------------------------------------------------------------------ optimizer state
    # fairscale's optimizer holds one state per flat parameter shard, in a layout (flattening,
    # padding, nesting) that differs between releases.  Rather than reading private metadata,
    # everything goes through fairscale's own full ``state_dict``/``load_state_dict``: a state
    # tensor shaped like a shard is put where the shard is, and fairscale gathers and
    # unflattens it by original name (or, loading, flattens and shards it).  One pass that
    # marks each flat parameter with its number tells which names each one holds.

    def _flat(self) -> list[torch.nn.Parameter]:
        return list(self.model.parameters())

    @torch.no_grad()
    def _through_params(self, shards: Sequence[torch.Tensor | None], fn: Callable[[], T]) -> T:
        """``fn()`` while each flat parameter's local shard holds ``shards[i]`` (None: itself)."""
        params = self._flat()
        kept = [p.data.clone() for p in params]
        try:
            for param, shard in zip(params, shards):
                if shard is not None:
                    param.data.copy_(shard)
            return fn()
        finally:
            for param, data in zip(params, kept):
                param.data.copy_(data)

    def _gather(self, shards: Sequence[torch.Tensor | None]) -> dict[str, torch.Tensor]:
        """Full tensors by original parameter name for these shards (collective)."""

        def full() -> dict[str, torch.Tensor]:
            state = self.model.state_dict()
            missing = [n for n in self._names if n not in state]
            if missing:
                raise RuntimeError(f"fairscale-fsdp: state_dict lacks parameters {missing[:5]}")
            return {n: state[n].detach().cpu().clone() for n in self._names}

        return self._through_params(shards, full)

    def _owners(self) -> dict[str, int]:
        """Original parameter name -> index of the flat parameter holding it (collective, cached)."""
        if self._owner is None:
            params = self._flat()
            marks = [torch.full_like(p.data, float(i + 1)) for i, p in enumerate(params)]
            owner: dict[str, int] = {}
            for name, full in self._gather(marks).items():
                values = torch.unique(full)
                if values.numel() == 0:
                    continue  # an empty parameter has no state
                if values.numel() != 1 or not 1 <= int(values) <= len(params):
                    raise RuntimeError(f"fairscale-fsdp: cannot tell which flat parameter holds {name!r}")
                owner[name] = int(values) - 1
            self._owner = owner
        return self._owner

    def optimizer_state_dict(self, *, rank0_only: bool = True) -> dict[str, Any]:
        owner = self._owners()
        params = self._flat()
        local = [self.optimizer.state.get(p, {}) for p in params]
        sharded = sorted({k for p, st in zip(params, local) for k, v in st.items() if _like_shard(v, p)})
        full = {key: self._gather([st.get(key) for st in local]) for key in sharded}
        if rank0_only and self.placement.rank != 0:
            return {}
        state: dict[str, dict[str, Any]] = {}
        for name in self._names:
            if name not in owner or not local[owner[name]]:
                continue
            mine = local[owner[name]]
            state[name] = {k: full[k][name] if k in sharded else _cloned(v) for k, v in mine.items()}
        groups = [
            {**{k: v for k, v in group.items() if k != "params"}, "params": names}
            for group, names in zip(self.optimizer.param_groups, self.optimizer_group_names())
        ]
        return {"state": state, "param_groups": groups}

    def optimizer_group_names(self) -> list[list[str]]:
        """The original names each group's flat parameters hold, in model order (collective)."""
        owner = self._owners()
        index = {id(p): i for i, p in enumerate(self._flat())}
        held = [{index[id(p)] for p in group["params"]} for group in self.optimizer.param_groups]
        return [[n for n in self._names if owner.get(n) in flat] for flat in held]

    def _load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        owner = self._owners()
        params = self._flat()
        saved: dict[str, dict[str, Any]] = state["state"]
        held: list[list[str]] = [[] for _ in params]
        for name in self._names:
            if name in owner:
                held[owner[name]].append(name)
        sharded = sorted({k for n, st in saved.items() for k, v in st.items()
                          if isinstance(v, torch.Tensor) and tuple(v.shape) == self._shapes[n]})
        new: dict[int, dict[str, Any]] = {}
        for i, names in enumerate(held):
            present = [n for n in names if n in saved]
            if present:  # per-element keys come below; scalars (``step``) from the first name
                new[i] = {k: _cloned(v) for k, v in saved[present[0]].items() if k not in sharded}
        if sharded:
            base = self.model.state_dict()
            base = {k: v.detach().clone() for k, v in base.items()}
        for key in sharded:
            values = dict(base)
            for i, names in enumerate(held):
                if i in new and any(key in saved.get(n, {}) for n in names):
                    for n in names:
                        value = saved.get(n, {}).get(key)
                        values[n] = value if value is not None else torch.zeros(self._shapes[n])
            shards: list[torch.Tensor] = []
            self._through_params([None] * len(params), functools.partial(_load_and_read, self, values, shards))
            for i, names in enumerate(held):
                if i in new and any(key in saved.get(n, {}) for n in names):
                    new[i][key] = shards[i]
        index = {id(p): i for i, p in enumerate(params)}
        groups = [  # state's groups are this optimizer's (Prepared.load_optimizer_state_dict)
            {**{k: v for k, v in saved_group.items() if k != "params"}, "params": [index[id(p)] for p in group["params"]]}
            for group, saved_group in zip(self.optimizer.param_groups, state["param_groups"])
        ]
        self.optimizer.load_state_dict({"state": new, "param_groups": groups})


def _load_and_read(prepared: FairscaleFsdpPrepared, values: dict[str, torch.Tensor],
                   out: list[torch.Tensor]) -> None:
    """Load ``values`` as the full model state, then copy out each flat parameter's local shard."""
    prepared.model.load_state_dict(values)
    out.extend(p.data.detach().clone() for p in prepared.model.parameters())


def _like_shard(value: Any, param: torch.Tensor) -> bool:
    """Whether an optimizer state entry is per element (shaped like the local shard)."""
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape == param.data.shape

BACKEND = FairscaleFsdp()
