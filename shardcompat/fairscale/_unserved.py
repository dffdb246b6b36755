"""The fairscale names the facade does not serve, each with the reason and what to use instead.

One table, read three ways: ``shardcompat.fairscale.<name>`` raises ``AttributeError`` with
the row's text; ``docs/fairscale-facade.md`` carries :func:`markdown_table`; and, with
fairscale installed, a test checks that every public name of the fairscale modules users
import from is either served or listed here.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["UNSERVED", "Unserved", "markdown_table", "refusal"]


class Unserved(NamedTuple):
    where: str  # the fairscale module(s) it is imported from
    why: str
    instead: str


UNSERVED: dict[str, Unserved] = {
    "FlattenParamsWrapper": Unserved(
        "fairscale.nn, fairscale.nn.misc", "FSDP's internal parameter flattener, not a training API",
        "FullyShardedDataParallel(flatten_parameters=True) flattens; torch FSDP1's is internal too"),
    "GradBucket": Unserved("fairscale.nn.misc", "an internal buffer of ShardedDataParallel",
                           "nothing: DDP buckets gradients itself (reduce_buffer_size sets the size)"),
    "ParamBucket": Unserved("fairscale.nn.misc", "an internal buffer of OSS",
                            "nothing: ZeroRedundancyOptimizer broadcasts parameters itself"),
    "no_pre_load_state_dict_hook": Unserved(
        "fairscale.nn.data_parallel", "switches off fairscale FSDP's own load_state_dict key rewriting",
        "nothing on the native side: torch FSDP's state_dict()/load_state_dict() use the original keys"),
    "GradScaler": Unserved(
        "fairscale.optim, fairscale.optim.grad_scaler",
        "torch.cuda.amp.GradScaler that also unscales fp16 gradients (pure fp16 parameters)",
        "torch.amp.GradScaler('cuda') with fp32 parameters (FSDP mixed_precision=True); ShardedGradScaler "
        "for sharded optimizers"),
    "OptState": Unserved("fairscale.optim.grad_scaler", "GradScaler's internal stage enum",
                         "torch.amp.grad_scaler.OptState"),
    "AdaScale": Unserved("fairscale.optim", "an optimizer wrapper that adapts the learning rate to the "
                         "gradient variance; torch has no equivalent", "keep importing it from fairscale"),
    "AdaScaleWrapper": Unserved("fairscale.optim", "AdaScale for any optimizer (see AdaScale)",
                                "see AdaScale"),
    "MOELayer": Unserved("fairscale.nn", "mixture-of-experts layers, not data parallelism",
                         "keep importing it from fairscale: it does not depend on the classes served here"),
    "Top2Gate": Unserved("fairscale.nn", "the MOELayer gate (see MOELayer)", "see MOELayer"),
    "Pipe": Unserved("fairscale.nn", "pipeline parallelism, not data parallelism",
                     "torch.distributed.pipelining"),
    "PipeRPCWrapper": Unserved("fairscale.nn", "RPC pipeline parallelism (see Pipe)",
                               "torch.distributed.pipelining"),
    "torch_version": Unserved("fairscale.internal, fairscale.optim.grad_scaler",
                              "a version tuple helper, not an API",
                              "packaging.version.Version(torch.__version__).release"),
    "recursive_copy_to_device": Unserved("fairscale.internal.params", "an internal helper",
                                         "torch.utils._pytree.tree_map(lambda t: t.to(device), value)"),
    "get_process_group_cached": Unserved("fairscale.internal.parallel", "fairscale's cache of process groups",
                                         "torch.distributed.new_group / new_subgroups, kept by the caller"),
    "MEVO": Unserved("fairscale.experimental.nn", "an experimental memory-efficient vocabulary output layer",
                     "keep importing it from fairscale, or a plain output layer and cross-entropy"),
}


def refusal(name: str) -> str:
    row = UNSERVED[name]
    return (f"shardcompat.fairscale does not serve fairscale's {name} ({row.where}): {row.why}. "
            f"Use instead: {row.instead}")


def markdown_table() -> str:
    """The table as Markdown, for ``docs/fairscale-facade.md``."""
    rows = ["| fairscale name | imported from | why it is not served | use instead |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {row.where} | {row.why} | {row.instead} |" for name, row in UNSERVED.items()]
    return "\n".join(rows)
