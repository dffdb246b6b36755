"""What the facade does not serve, each with the reason and what to use instead.

Two tables: fairscale names inside modules the facade mirrors (``AdaScale`` in
``fairscale.optim``), and whole fairscale modules it does not mirror (``nn.model_parallel``).
Where each name was importable from is not repeated here: :mod:`._tree` says it.  Asking for
either gives the row's text: :class:`UnservedImport` (an ``ImportError``) on every import form,
so ``try: from ... import X / except ImportError`` fallbacks keep working, and
:class:`UnservedAttribute` (an ``AttributeError``) on attribute access, so ``hasattr`` and
``getattr`` with a default stay false instead of raising.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["UNSERVED", "UNSERVED_MODULES", "Row", "UnservedAttribute", "UnservedImport", "module_refusal", "refusal"]


class Row(NamedTuple):
    why: str
    instead: str


class UnservedImport(ImportError):
    """``from shardcompat.fairscale... import X`` / ``import shardcompat.fairscale.x`` of what is not served.

    Raised by ``_tree``'s import finder: Python turns an ``AttributeError`` from a module
    ``__getattr__`` into a bare "cannot import name", and one exception cannot be both (their
    layouts conflict), so the import system is given its own.
    """


class UnservedAttribute(AttributeError):
    """``shardcompat.fairscale.<module>.X`` of what is not served (the same text as :class:`UnservedImport`)."""


UNSERVED: dict[str, Row] = {
    "FlattenParamsWrapper": Row(
        "fairscale FSDP's internal parameter flattener: wrapping a module with it alone only renames its "
        "parameters (to flat_param_0) for a flattening that torch keeps inside FSDP, so no honest thin mapping "
        "exists, and isinstance checks against it would never match a native FSDP's module",
        "FullyShardedDataParallel(flatten_parameters=True) flattens; to reach the wrapped module use "
        "FullyShardedDataParallel.module (fairscale: .module.module)"),
    "GradBucket": Row("an internal buffer of ShardedDataParallel",
                      "nothing: DDP buckets gradients itself (reduce_buffer_size sets the size)"),
    "ParamBucket": Row("an internal buffer of OSS", "nothing: ZeroRedundancyOptimizer broadcasts parameters itself"),
    "no_pre_load_state_dict_hook": Row(
        "switches off fairscale FSDP's own load_state_dict key rewriting",
        "nothing on the native side: torch FSDP's state_dict()/load_state_dict() use the original keys"),
    "OffloadConfig": Row("the SSD-offload setting of fairscale FSDP 0.4.3-0.4.10 (experimental, gone in 0.4.11)",
                         "FullyShardedDataParallel(move_params_to_cpu=True) offloads to CPU; torch FSDP has no "
                         "SSD offload"),
    "GradScaler": Row(
        "torch.cuda.amp.GradScaler that also unscales fp16 gradients (pure fp16 parameters)",
        "torch.amp.GradScaler('cuda') with fp32 parameters (FSDP mixed_precision=True); ShardedGradScaler "
        "for sharded optimizers"),
    "OptState": Row("GradScaler's internal stage enum", "torch.amp.grad_scaler.OptState"),
    "AdaScale": Row("an optimizer wrapper that adapts the learning rate to the gradient variance; torch has no "
                    "equivalent", "keep importing it from fairscale"),
    "AdaScaleWrapper": Row("AdaScale for any optimizer (see AdaScale)", "see AdaScale"),
    "Adam": Row("fairscale's fused CUDA Adam with fp16 master weights",
                "torch.optim.Adam(fused=True) or torch.optim.AdamW, with fp32 parameters"),
    "Precision": Row("the precision enum of fairscale's fused Adam (see Adam)", "see Adam"),
    "MOELayer": Row("mixture-of-experts layers, not data parallelism",
                    "keep importing it from fairscale: it does not depend on the classes served here"),
    "Top2Gate": Row("the MOELayer gate (see MOELayer)", "see MOELayer"),
    "Pipe": Row("pipeline parallelism, not data parallelism", "torch.distributed.pipelining"),
    "PipeRPCWrapper": Row("RPC pipeline parallelism (see Pipe)", "torch.distributed.pipelining"),
    **dict.fromkeys(
        ("CheckpointFunction", "ThreadLocal", "ThreadLocalCheckpointingState", "thread_local", "enable_checkpointing",
         "enable_recomputing", "get_rng_state", "set_rng_state", "autocast", "is_autocast_enabled"),
        Row("an internal of fairscale's checkpoint_wrapper (its autograd function, the RNG and autocast state it "
            "carries to the recomputation, the thread-local phase it sets)",
            "checkpoint_wrapper to checkpoint, is_checkpointing()/is_recomputing() to read the phase, "
            "torch.utils.checkpoint for the rest")),
    **dict.fromkeys(
        ("alloc_storage_", "free_storage_", "cast_buffers_", "cast_floats_to_right_precision", "cast_inputs_to_fp16",
         "p_assert"),
        Row("an internal helper of fairscale's FullyShardedDataParallel (storage resizing, precision casts, asserts)",
            "nothing: FullyShardedDataParallel(mixed_precision=True) casts, and torch FSDP manages its storage")),
    **dict.fromkeys(("FlatParameter", "FlatTypes", "ParamGroups"),
                    Row("the parameter type and aliases of FlattenParamsWrapper (see FlattenParamsWrapper)",
                        "see FlattenParamsWrapper")),
}

_INTERNAL = Row("fairscale's internal helpers, not a training API",
                "torch.utils._pytree / torch.distributed for what you used, or keep importing it from fairscale")

UNSERVED_MODULES: dict[str, Row] = {
    "nn.model_parallel": Row("Megatron-style tensor model parallelism, not data parallelism",
                             "torch.distributed.tensor.parallel"),
    "nn.pipe": UNSERVED["Pipe"],
    "nn.moe": UNSERVED["MOELayer"],
    "nn.data_parallel.fsdp_optim_utils": _INTERNAL,
    "nn.checkpoint.checkpoint_utils": _INTERNAL,
    "nn.misc.grad_bucket": Row("the internal buffer of ShardedDataParallel (0.3.2's GradBucket)",
                               "nothing: torch's DDP manages its own buckets"),
    "nn.misc.misc": _INTERNAL,  # patch_batchnorm, 0.3.1-0.3.6
    "nn.misc.param_bucket": Row("the internal buffers of OSS and ShardedDataParallel (GradBucket, ParamBucket)",
                                "nothing: torch's DDP and ZeroRedundancyOptimizer manage their own buffers"),
    "optim.adam": UNSERVED["Adam"],
    "optim.adascale": UNSERVED["AdaScale"],
    "optim.layerwise_gradient_scaler": Row("an experimental per-layer gradient scaler",
                                           "torch.amp.GradScaler, or keep importing it from fairscale"),
    "optim.utils": _INTERNAL,
    "experimental": Row("fairscale's experimental features (MEVO, OffloadModel, SlowMo DDP, SyncBatchNorm, "
                        "wgit, the layer memory tracker)",
                        "keep importing them from fairscale; torch.nn.SyncBatchNorm for SyncBatchNorm"),
    "fair_dev": Row("fairscale's own test helpers (dist_init, DummyProcessGroup...)",
                    "torch.testing and a process group of your own (shardcompat.launch.spawn runs ranks)"),
    **{f"{root}.{name}": _INTERNAL for root in ("utils", "internal")
       for name in ("containers", "object", "parallel", "params", "reduce_scatter_bucketer", "state_dict")},
    **{f"utils.{name}": Row("fairscale's own test helpers (dist_init, DummyProcessGroup...)",
                            "torch.testing and a process group of your own (shardcompat.launch.spawn runs ranks)")
       for name in ("testing", "testing_memory", "golden_testing_data")},
}


def refusal(name: str, where: str) -> str:
    row = UNSERVED[name]
    return (f"shardcompat.fairscale does not serve fairscale's {name} ({where}): {row.why}. "
            f"Use instead: {row.instead}")


def module_refusal(path: str) -> str:
    row = UNSERVED_MODULES[path]
    return (f"shardcompat.fairscale does not mirror fairscale.{path}: {row.why}. Use instead: {row.instead}")
