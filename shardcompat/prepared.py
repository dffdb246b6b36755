"""``Prepared``: the one object a training loop uses, whatever backend is underneath."""

from __future__ import annotations

import abc
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .checkpoint import load_checkpoint, save_checkpoint
from .checkpoint._groups import match_groups
from .checkpoint._protocol import local_optimizer as _local_optimizer
from .options import ShardingOptions

if TYPE_CHECKING:
    from .backends._base import Placement, Plan

__all__ = ["Prepared"]


class Prepared(abc.ABC):
    """A wrapped model with its sharded optimizer; the same surface on every backend.

    ``model`` is what you call (the wrapped model), ``module`` the original, unwrapped model
    (parameter names as you wrote them), ``optimizer`` the optimizer built on the shards.
    Methods marked *collective* must be called on every rank.
    """

    def __init__(
        self,
        *,
        model: torch.nn.Module,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        plan: Plan,
        placement: Placement,
        scaler: Any = None,
    ) -> None:
        self.model = model
        self.module = module
        self.optimizer = optimizer
        self.plan = plan
        self.placement = placement
        self.scaler = scaler
        self.step_count = 0
        # The names of each parameter the model shares between modules, read by prepare()
        # before wrapping (fairscale FSDP flattens them out of ``module``); else from ``module``.
        self.tied: list[list[str]] | None = None

    @property
    def backend(self) -> str:
        return self.plan.backend

    @property
    def options(self) -> ShardingOptions:
        return self.plan.options

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Prepared(backend={self.backend!r}, options='{self.options}')"

    # ------------------------------------------------------------------ training step
    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, scaled when fp16 needs a grad scaler."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self) -> None:
        """``optimizer.step()``, through the grad scaler when there is one."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.step_count += 1

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Skip gradient synchronisation (gradient accumulation); the next backward syncs."""
        no_sync = getattr(self.model, "no_sync", None)
        return no_sync() if no_sync is not None else contextlib.nullcontext()

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Clip by the global norm over all shards (collective); returns the norm before clipping.

        With fp16's grad scaler the gradients are unscaled first (``scaler.unscale_``), so the
        norm and the clipping are the true gradients' (not 65536 times them), and ``step()``
        does not unscale again: the order torch's AMP recipe prescribes.
        """
        self.unscale_()
        return self._clip_grad_norm(max_norm, norm_type)

    def unscale_(self) -> None:
        """Divide the gradients by fp16's loss scale, at most once between two optimizer steps.

        Every caller that needs the true gradients goes through here (``clip_grad_norm_``, the
        Trainer's clipping and grad-norm logging, a user's own ``scaler.unscale_`` first): the
        scaler's record of this step says whether it already happened, so a second call is a
        no-op instead of torch's "unscale_() has already been called" error (or, with a scaler
        that does not check, gradients divided twice).  ``scaler.step`` then does not unscale again.
        """
        if self.scaler is not None and not unscaled(self.scaler, self.optimizer):
            self.scaler.unscale_(self.optimizer)

    @abc.abstractmethod
    def _clip_grad_norm(self, max_norm: float, norm_type: float) -> torch.Tensor:
        """The backend's clip of the (unscaled) gradients by their global norm (collective)."""

    # ------------------------------------------------------------------ state
    def full_state_dict(self, *, rank0_only: bool = True) -> dict[str, torch.Tensor]:
        """Full model state keyed by the original names, on CPU (collective).

        With ``rank0_only`` the other ranks get ``{}``.  A parameter the model shares between
        modules (GPT-2's ``lm_head.weight`` tied to ``transformer.wte.weight``) is listed under
        each of its names as one tensor, as ``module.state_dict()`` lists it: ``torch.save``
        then writes it once, and ``save_pretrained`` drops the tied name as it does for the
        unsharded model, so the files hold the keys a plain DDP run writes.
        """
        tied = self.tied if self.tied is not None else shared_names(self.module)
        return tie_shared(tied, self._full_state_dict(rank0_only=rank0_only))

    @abc.abstractmethod
    def _full_state_dict(self, *, rank0_only: bool) -> dict[str, torch.Tensor]:
        """The backend's gathered full state (its tensors may be separate copies of shared ones)."""

    @abc.abstractmethod
    def optimizer_state_dict(self, *, rank0_only: bool = True) -> dict[str, Any]:
        """Consolidated optimizer state keyed by parameter name (collective).

        ``{"state": {name: {...}}, "param_groups": [{..., "params": [names]}]}``.
        """

    def optimizer_group_names(self) -> list[list[str]]:
        """The original names of the parameters in each of the optimizer's groups, in its order.

        What a checkpoint's parameter groups are matched against (collective: backends that
        flatten parameters ask the other ranks which names a flat parameter holds).
        """
        names = {id(p): _original_name(n) for n, p in self.module.named_parameters()}
        try:
            return [[names[id(p)] for p in group["params"]] for group in self.optimizer.param_groups]
        except KeyError:
            raise RuntimeError(f"{self.backend}: the optimizer holds a tensor that is not a parameter of the model") from None

    @abc.abstractmethod
    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load a full model state (as from :meth:`full_state_dict`) on every rank (collective)."""

    def load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        """Load a name-keyed consolidated optimizer state on every rank (collective).

        Its parameter groups are matched to this optimizer's by the names they hold, so a state
        saved with other groups (another backend, another grouping) loads where nothing is lost:
        each group takes the saved settings of its parameters.  Otherwise
        :class:`~shardcompat.checkpoint.CheckpointError` says why, and nothing is loaded.
        """
        names = self.optimizer_group_names()
        groups = match_groups(state["param_groups"], names, self.optimizer.param_groups, state["state"])
        self._load_optimizer_state_dict({"state": state["state"], "param_groups": groups})

    @abc.abstractmethod
    def _load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        """Load ``state``, whose groups are this optimizer's, by name and in order (collective)."""

    def local_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor this rank holds for training: ``("param"|"grad"|"optim", tensor)``.

        Backends whose wrapped model or optimizer hides the local shards override this;
        the memory report counts unique storages from it.
        """
        for param in self.model.parameters():
            local = param.to_local() if hasattr(param, "to_local") else param
            yield "param", local
            if param.is_leaf and param.grad is not None:  # FSDP2's unsharded views are not leaves
                grad = param.grad
                yield "grad", grad.to_local() if hasattr(grad, "to_local") else grad
        for state in _local_optimizer(self.optimizer).state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    yield "optim", value.to_local() if hasattr(value, "to_local") else value

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path: str | Path, **extra: Any) -> Path:
        """Write a portable checkpoint atomically (collective); see :mod:`shardcompat.checkpoint`."""
        written: Path = save_checkpoint(self, path, **extra)
        return written

    def load_checkpoint(self, path: str | Path, *, scheduler: Any = None, restore_rng: bool = True) -> dict[str, Any]:
        """Restore model, optimizer, step, RNG (unless ``restore_rng=False``) and ``scheduler``
        from ``path`` (collective); see :func:`shardcompat.checkpoint.load_checkpoint`."""
        extra: dict[str, Any] = load_checkpoint(self, path, scheduler=scheduler, restore_rng=restore_rng)
        return extra


_WRAPPERS = re.compile(r"(?:^|(?<=\.))(?:_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\.")


def _original_name(name: str) -> str:
    """``name`` without the segments FSDP1, activation checkpointing and ``torch.compile`` insert."""
    return _WRAPPERS.sub("", name)


def shared_names(module: torch.nn.Module) -> list[list[str]]:
    """The names of each parameter (or buffer) ``module`` holds under more than one name.

    ``remove_duplicate=False`` lists a tied parameter under each of its names.
    """
    shared: dict[int, list[str]] = {}
    for name, tensor in [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]:
        shared.setdefault(id(tensor), []).append(_original_name(name))
    return [names for names in shared.values() if len(names) > 1]


def tie_shared(tied: list[list[str]], state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every name of one shared tensor pointing at one tensor; a name the
    backend left out is filled in from its twin."""
    for names in tied:
        present = [n for n in names if n in state]
        for name in names if present else ():
            state[name] = state[present[0]]
    return state


def unscaled(scaler: Any, optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``scaler.unscale_(optimizer)`` already ran since the last ``scaler.update()``.

    Read from the scaler's own per-optimizer record (torch's ``GradScaler`` and every
    ``ShardedGradScaler`` built on it keep one, keyed by the optimizer's id, with the stage
    ``OptState.UNSCALED``), so it is right whoever called ``unscale_``.
    """
    states = getattr(scaler, "_per_optimizer_states", None)
    if not isinstance(states, dict) or id(optimizer) not in states:
        return False
    stage = states[id(optimizer)].get("stage")
    return getattr(stage, "name", None) in ("UNSCALED", "STEPPED")

