"""``enable_wrap`` / ``wrap`` / ``auto_wrap`` with fairscale's semantics, for any wrapper class.

Written here rather than imported so that it works without fairscale (and on fairscale
versions without ``fairscale.nn.wrap``).  As in fairscale: ``wrap`` and ``auto_wrap`` do
nothing outside an ``enable_wrap`` context (its state lives on :class:`ConfigAutoWrap`, as in
fairscale); inside, ``wrap`` builds
``wrapper_cls(module, **kwargs)`` with the context's kwargs, then ``module.wrapper_config``,
then the call's overrides; ``auto_wrap`` walks the children bottom-up and wraps what the
policy picks.  Unlike fairscale, ``wrapper_cls`` defaults to this package's
``FullyShardedDataParallel`` instead of being required.  fairscale's helpers built on them
(``config_auto_wrap_policy``, ``auto_wrap_bn``, ``get_fsdp_instances``) are here too, so they
wrap with, and find, the facade's ``FullyShardedDataParallel`` whichever library serves it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ._classes import implementation
from ._select import announce

__all__ = [
    "ConfigAutoWrap",
    "auto_wrap",
    "auto_wrap_bn",
    "config_auto_wrap_policy",
    "default_auto_wrap_policy",
    "enable_wrap",
    "get_fsdp_instances",
    "wrap",
]

Policy = Callable[..., bool]


def default_auto_wrap_policy(
    module: nn.Module,
    recurse: bool,
    unwrapped_params: int,
    module_is_root: bool,
    min_num_params: int = int(1e8),
    force_leaf_modules: set[type[nn.Module]] | None = None,
    exclude_wrap_modules: set[type[nn.Module]] | None = None,
    skip_params_check_for_root: bool = False,
) -> bool:
    """fairscale's default: recurse into and wrap modules with at least ``min_num_params``."""
    leaves = default_auto_wrap_policy.FORCE_LEAF_MODULES if force_leaf_modules is None else force_leaf_modules  # type: ignore[attr-defined]
    excluded = default_auto_wrap_policy.EXCLUDE_WRAP_MODULES if exclude_wrap_modules is None else exclude_wrap_modules  # type: ignore[attr-defined]
    is_large = unwrapped_params >= min_num_params
    if recurse:
        return is_large and not isinstance(module, tuple(leaves))
    return ((module_is_root and skip_params_check_for_root) or is_large) and not isinstance(module, tuple(excluded))


default_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}  # type: ignore[attr-defined]
default_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}  # type: ignore[attr-defined]


def config_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int, module_is_root: bool) -> bool:
    """Recurse everywhere; wrap exactly the modules tagged with a ``wrapper_config`` dict."""
    return recurse or hasattr(module, "wrapper_config")


class ConfigAutoWrap:
    """The ``enable_wrap`` context, kept where fairscale keeps it: class attributes code reads
    (``ConfigAutoWrap.in_autowrap_context``, ``.wrapper_cls``, ``.kwargs``...), the static
    methods that set and clear them, and the instance as a context manager."""

    in_autowrap_context: bool = False
    move_module_cuda_half: bool = False  # always False here: enable_wrap refuses it
    wrapper_cls: Callable[..., nn.Module] | None = None
    kwargs: dict[str, Any] = {}  # noqa: RUF012 - fairscale's class-level state
    auto_wrap_policy: Policy | None = None

    def __init__(self, auto_wrap_policy: Policy | None = None, **kwargs: Any) -> None:
        self.auto_wrap_policy = auto_wrap_policy
        self.kwargs = kwargs

    @staticmethod
    def enable_autowrap_context(auto_wrap_policy: Policy | None, kwargs: dict[str, Any]) -> None:
        if ConfigAutoWrap.in_autowrap_context:
            raise NotImplementedError("enable_wrap contexts cannot be nested (as in fairscale)")
        kwargs = dict(kwargs)
        wrapper_cls = kwargs.pop("wrapper_cls", None)
        if kwargs.pop("move_module_cuda_half", False):
            raise NotImplementedError("enable_wrap(move_module_cuda_half=True): call module.cuda().half() yourself")
        if wrapper_cls is None:
            wrapper_cls = implementation("FullyShardedDataParallel")
        ConfigAutoWrap.in_autowrap_context = True
        ConfigAutoWrap.wrapper_cls = wrapper_cls
        ConfigAutoWrap.auto_wrap_policy = auto_wrap_policy or default_auto_wrap_policy
        ConfigAutoWrap.kwargs = kwargs

    @staticmethod
    def disable_autowrap_context() -> None:
        ConfigAutoWrap.in_autowrap_context = False
        ConfigAutoWrap.wrapper_cls = None
        ConfigAutoWrap.auto_wrap_policy = None
        ConfigAutoWrap.kwargs = {}

    def __enter__(self) -> None:
        self.enable_autowrap_context(self.auto_wrap_policy, self.kwargs)

    def __exit__(self, *exc: object) -> None:
        self.disable_autowrap_context()

    @staticmethod
    def recursive_wrap(module: nn.Module, auto_wrap_policy: Policy | None, module_is_root: bool,
                       **kwargs: Any) -> tuple[nn.Module, int]:
        """Wrap ``module``'s children (bottom-up) that the policy picks, then the remainder;
        returns the module and how many parameters ended up wrapped."""
        policy = auto_wrap_policy or ConfigAutoWrap.auto_wrap_policy or default_auto_wrap_policy
        wrapper = ConfigAutoWrap.wrapper_cls
        if isinstance(wrapper, type) and any(isinstance(m, wrapper) for m in module.modules()):
            raise ValueError(f"auto_wrap: {type(module).__name__} already contains a {wrapper.__name__}")
        total = sum(p.numel() for p in module.parameters())
        if not policy(module=module, recurse=True, unwrapped_params=total, module_is_root=module_is_root):
            return module, 0
        wrapped_params = 0
        for name, child in module.named_children():
            new_child, count = ConfigAutoWrap.recursive_wrap(child, policy, False, **kwargs)
            setattr(module, name, new_child)
            wrapped_params += count
        if policy(module=module, recurse=False, unwrapped_params=total - wrapped_params, module_is_root=module_is_root):
            return wrap(module, **kwargs), total
        return module, wrapped_params


@contextlib.contextmanager
def enable_wrap(auto_wrap_policy: Policy | None = None, **wrapper_kwargs: Any) -> Iterator[None]:
    """Within this context ``wrap``/``auto_wrap`` wrap with ``wrapper_cls`` and these kwargs."""
    with ConfigAutoWrap(auto_wrap_policy, **wrapper_kwargs):
        yield


def wrap(module: nn.Module, **wrap_overrides: Any) -> nn.Module:
    """``wrapper_cls(module, ...)`` inside ``enable_wrap``; ``module`` unchanged outside."""
    if not ConfigAutoWrap.in_autowrap_context or ConfigAutoWrap.wrapper_cls is None:
        return module
    config = getattr(module, "wrapper_config", {})
    assert isinstance(config, dict), "module.wrapper_config must be a dict"
    return ConfigAutoWrap.wrapper_cls(module, **{**ConfigAutoWrap.kwargs, **config, **wrap_overrides})


def auto_wrap(module: nn.Module, auto_wrap_policy: Policy | None = None, **kwargs: Any) -> nn.Module:
    """Wrap ``module``'s children (bottom-up) that the policy picks, and the remainder."""
    if not ConfigAutoWrap.in_autowrap_context:
        return module
    return ConfigAutoWrap.recursive_wrap(module, auto_wrap_policy, True, **kwargs)[0]


def get_fsdp_instances(mod: nn.Module, skip_empty: bool = False) -> list[Any]:
    """Every facade ``FullyShardedDataParallel`` in ``mod`` (itself included), outermost first;
    ``skip_empty`` leaves out units that shard no parameter of their own."""
    FullyShardedDataParallel = implementation("FullyShardedDataParallel")
    found = [m for m in mod.modules() if isinstance(m, FullyShardedDataParallel)]
    return [m for m in found if m.non_shared_params()] if skip_empty else found


@functools.cache
def _own_rank_group() -> Any:
    """A process group of this rank alone (a collective the first time: every rank builds all of them)."""
    group, _ = dist.new_subgroups(group_size=1)  # type: ignore[no-untyped-call]
    return group


def auto_wrap_bn(
    module: nn.Module,
    single_rank_pg: bool = False,
    process_group: Any = None,
    fsdp_config: dict[str, Any] | None = None,
    wrap_it: bool = True,
    assert_on_collision: bool = True,
) -> nn.Module:
    """Put every batch-norm layer in its own full-precision, unflattened unit (fairscale's recipe).

    The layers are tagged with ``wrapper_config`` (default: fp32, ``reshard_after_forward=False``,
    ``flatten_parameters=False`` where fairscale serves FSDP; torch FSDP needs one flattening for
    all nested units, so natively the default one; ``single_rank_pg`` gives each rank its own
    group) and, with ``wrap_it``, wrapped by :func:`auto_wrap` under :func:`config_auto_wrap_policy`.
    """
    if fsdp_config is None:
        group = _own_rank_group() if single_rank_pg else process_group
        fsdp_config = {"process_group": group, "mixed_precision": False, "reshard_after_forward": False}
        if announce("FullyShardedDataParallel").impl == "fairscale":
            fsdp_config["flatten_parameters"] = False
    for child in module.modules():
        if isinstance(child, _BatchNorm):
            if assert_on_collision and hasattr(child, "wrapper_config"):
                raise ValueError(f"auto_wrap_bn: {type(child).__name__} already has a wrapper_config; "
                                 "pass assert_on_collision=False to replace it")
            child.wrapper_config = fsdp_config  # type: ignore[assignment]
    if not wrap_it:
        return module
    FullyShardedDataParallel = implementation("FullyShardedDataParallel")
    with enable_wrap(config_auto_wrap_policy, wrapper_cls=FullyShardedDataParallel):
        return auto_wrap(module)
