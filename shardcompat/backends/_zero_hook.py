"""ZeRO-1 at the ZeRO model's 2Ψ: a DDP communication hook that reduce-scatters each gradient
bucket to the ranks that own its parameters in ``ZeroRedundancyOptimizer``'s partition.

DDP's own all-reduce gives every rank every reduced gradient (2Ψ), and ZeRO then broadcasts
each owner's updated parameters (Ψ): 3Ψ a step, though each rank only steps the parameters it
owns.  This hook replaces the all-reduce with one ``reduce_scatter`` per bucket (Ψ, the list
form: ZeRO's partition gives each rank a different number of elements in a bucket, none at
all in some), so only the owners get the reduced gradients; ZeRO's bucketed broadcast adds Ψ.

Non-owners' gradients are set to zero (DDP keeps a gradient on every parameter, so they cannot
be ``None`` as in fairscale's ShardedDDP): a norm over every local gradient is then the norm of
the owned ones, and :func:`clip_sharded_grad_norm_` all-reduces the per-parameter norms.  The
owned parts are averaged over the ranks, as DDP's all-reduce averages them.  As with ShardedDDP,
this holds for gradients zeroed after each step (``zero_grad`` does it for every parameter the
optimizer holds): a gradient left to add up over steps (a trainable parameter the optimizer
leaves out) is reduced again with the owner's previous average in it, so it is not DDP's sum.
Such a parameter has no owner; rank 0 receives its gradient.

``reduce_scatter`` with a list of uneven tensors runs on gloo (CPU tensors only) and NCCL
(which groups one reduce per rank); :func:`hook_unavailable` says when it cannot run.  gloo's
reduce-scatter has no future, so on gloo the hook waits for each bucket's reduction before
backward goes on (NCCL's overlaps with backward, as DDP's all-reduce does).
"""

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["Owners", "clip_sharded_grad_norm_", "hook_unavailable", "reduce_scatter_to_owners"]


def hook_unavailable(backend: str | None, cuda: bool) -> str:
    """Why the hook cannot run on this process group backend and device ('' when it can)."""
    if backend == "nccl" or (backend == "gloo" and not cuda):
        return ""
    if backend == "gloo":
        return "gloo has no reduce-scatter for CUDA tensors"
    return f"reduce-scatter of uneven tensors is not known to work on the {backend!r} process group backend"


class Owners:
    """The hook's state: ZeRO's optimizer (whose partition names each parameter's owner) and
    the process group.  The partition is read on every call (ZeRO rebuilds it when the
    trainable parameters change), so DDP's rebuilt buckets after the first step need nothing."""

    def __init__(self, zero: Any, group: dist.ProcessGroup | None) -> None:
        self.zero = zero
        self.group = group
        self.buckets_reduced = 0  # calls so far: what tests compare the collectives with


# No ``from __future__ import annotations`` here: DDP insists that the ``bucket`` annotation
# is the class ``dist.GradBucket`` itself, not its name.
def reduce_scatter_to_owners(
    state: Owners, bucket: dist.GradBucket  # type: ignore[name-defined]
) -> torch.futures.Future[torch.Tensor]:
    """``ddp.register_comm_hook(Owners(zero, group), reduce_scatter_to_owners)``: per bucket,
    one reduce-scatter of the gradients to their owners in ZeRO's partition."""
    world = dist.get_world_size(state.group)
    me = dist.get_rank(state.group)
    owner = state.zero._param_to_rank
    buffer = bucket.buffer()
    per_rank: list[list[torch.Tensor]] = [[] for _ in range(world)]
    for param, grad in zip(bucket.parameters(), bucket.gradients()):
        # A parameter the optimizer factory left out has no owner and is stepped by no one:
        # rank 0 gets its reduced gradient, so none is lost.
        per_rank[owner.get(param, 0)].append(grad)
    inputs = [torch.cat([g.reshape(-1) for g in grads]) if grads else buffer.new_empty(0)
              for grads in per_rank]
    for chunk in inputs:
        chunk.div_(world)  # the average, as DDP's all-reduce hook divides before it reduces
    out = torch.empty_like(inputs[me])
    work = dist.reduce_scatter(out, inputs, group=state.group, async_op=True)
    assert work is not None
    state.buckets_reduced += 1
    mine = per_rank[me]

    def scatter_back(_: torch.futures.Future[Any]) -> torch.Tensor:
        buffer.zero_()  # non-owners' gradients: zero (see the module's docstring)
        offset = 0
        for grad in mine:
            grad.copy_(out[offset:offset + grad.numel()].view_as(grad))
            offset += grad.numel()
        result: torch.Tensor = buffer
        return result

    try:
        future: torch.futures.Future[torch.Tensor] = work.get_future().then(scatter_back)
    except RuntimeError:  # gloo's reduce_scatter has no future ("Work::getFuture not implemented")
        work.wait()
        future = torch.futures.Future()
        future.set_result(scatter_back(future))
    return future


def clip_sharded_grad_norm_(parameters: list[nn.Parameter], max_norm: float, norm_type: float,
                            group: dist.ProcessGroup | None) -> torch.Tensor:
    """Clip by the global norm when each rank holds its own gradients and zeros elsewhere.

    Bit for bit DDP's ``clip_grad_norm_``: each rank takes the norm of every gradient (0 where
    it is not the owner), one all-reduce sums them into the vector of per-parameter norms that
    DDP's clip stacks (x + 0 is exact), and the total is that vector's norm, as torch computes
    it.  A norm assembled otherwise (the ranks' partial norms combined) differs in the last
    bits, and an optimizer that divides by a gradient's own size (Adafactor, on GPT-2's key
    bias, whose gradient is rounding noise) turns those bits into whole learning-rate steps.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.zeros(())
    from torch.utils._foreach_utils import _has_foreach_support

    # the per-tensor norms torch's get_total_norm takes (foreach kernels where it uses them)
    if _has_foreach_support(grads, grads[0].device):
        each = list(torch._foreach_norm(grads, norm_type))
    else:
        each = [torch.linalg.vector_norm(g, norm_type) for g in grads]
    norms = torch.stack(each)
    dist.all_reduce(norms, group=group)
    total: torch.Tensor = torch.linalg.vector_norm(norms, norm_type)
    nn.utils.clip_grads_with_norm_([p for p in parameters if p.grad is not None], max_norm, total)
    return total
