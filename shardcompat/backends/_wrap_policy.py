"""Which submodules ``auto_wrap`` turns into their own sharded units; shared by FSDP backends.

The rule is chosen in one order everywhere: ``wrap=ClassName,...``, else the model's
``_no_split_modules`` (as Hugging Face models declare them), else ``min_num_params``
(default :data:`DEFAULT_MIN_NUM_PARAMS`).  Each backend turns the rule into its own
mechanism (an FSDP1 policy object, a list of modules for ``fully_shard``), so the same
options give the same units on every backend.

Tied parameters stay together: a group of parameters that are one tensor (found by identity,
as a head tied to its embedding is) or that the model declares tied (Hugging Face's
``_tied_weights_keys``) is never split between units.  A module that holds only part of a
group is not made a unit (its parameters count into its parent, up to the root), so BERT's
embeddings, whose word embedding is the masked-LM decoder's weight, shard with the root.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn

from ..options import ShardingOptions

__all__ = [
    "DEFAULT_MIN_NUM_PARAMS",
    "WrapClassNotFound",
    "WrapRule",
    "describe_rule",
    "modules_to_wrap",
    "tied_groups",
    "wrap_rule",
]

# torch's own size_based_auto_wrap_policy default (and Accelerate's): a unit of ~400 MB in fp32.
DEFAULT_MIN_NUM_PARAMS = 100_000_000

# As torch's size-based policy: attention is a leaf, bare containers (no forward) never units.
_LEAF_MODULES: tuple[type[nn.Module], ...] = (nn.MultiheadAttention,)
_CONTAINERS: tuple[type[nn.Module], ...] = (nn.ModuleList, nn.ModuleDict)


class WrapClassNotFound(ValueError):
    """``wrap=`` (or ``_no_split_modules``) names a class the model does not contain."""

    def __init__(self, missing: str, present: Iterable[str], source: str) -> None:
        choices = sorted(set(present))
        guess = difflib.get_close_matches(missing, choices, n=1)
        hint = f"; did you mean '{guess[0]}'?" if guess else ""
        super().__init__(
            f"auto_wrap: {source} names class '{missing}', which the model does not contain{hint} "
            f"Module classes in the model: {', '.join(choices)}"
        )
        self.token = missing
        self.choices = tuple(choices)
        self.suggestion = guess[0] if guess else None


@dataclass(frozen=True)
class WrapRule:
    """The resolved rule: wrap instances of ``classes``, or by size when ``min_num_params`` is set."""

    classes: frozenset[type[nn.Module]]
    min_num_params: int | None
    source: str  # "wrap=", "_no_split_modules", "min_num_params=" or "default min_num_params"

    def describe(self) -> str:
        if self.min_num_params is not None:
            return f"min_num_params={self.min_num_params} ({self.source})"
        return "{" + ", ".join(sorted(c.__name__ for c in self.classes)) + "} (" + self.source + ")"


def describe_rule(options: ShardingOptions) -> str:
    """The rule as far as it is known without the model (for ``explain``)."""
    if options.wrap:
        return "{" + ", ".join(options.wrap) + "}"
    if options.min_num_params is not None:
        return f"min_num_params={options.min_num_params}"
    return (
        f"model._no_split_modules if the model declares them, else "
        f"min_num_params={DEFAULT_MIN_NUM_PARAMS}"
    )


def _class_names(cls: type[nn.Module]) -> tuple[str, str]:
    return cls.__name__, f"{cls.__module__}.{cls.__qualname__}"


def _classes(model: nn.Module, names: Iterable[str], source: str) -> frozenset[type[nn.Module]]:
    present = {type(m) for m in model.modules()}
    found: set[type[nn.Module]] = set()
    for name in names:
        matches = {c for c in present if name in _class_names(c)}
        if not matches:
            raise WrapClassNotFound(name, (c.__name__ for c in present), source)
        found |= matches
    return frozenset(found)


def wrap_rule(model: nn.Module, options: ShardingOptions) -> WrapRule:
    """Resolve the ``auto_wrap`` rule for this model (raises :class:`WrapClassNotFound`)."""
    if options.wrap:
        return WrapRule(_classes(model, options.wrap, "wrap="), None, "wrap=")
    if options.min_num_params is not None:
        return WrapRule(frozenset(), options.min_num_params, "min_num_params=")
    no_split = list(getattr(model, "_no_split_modules", None) or ())
    if no_split:
        return WrapRule(_classes(model, no_split, "_no_split_modules"), None, "_no_split_modules")
    return WrapRule(frozenset(), DEFAULT_MIN_NUM_PARAMS, "default min_num_params")


def _declared_ties(model: nn.Module, names: set[str]) -> list[tuple[str, str]]:
    """``(target, source)`` pairs the model and its submodules declare in ``_tied_weights_keys``:
    a ``{target: source}`` mapping (Transformers 5), or a list of targets tied to the input
    embedding (4.x).  Ignored where the config unties the embeddings."""
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", True) is False:
        return []
    pairs: list[tuple[str, str]] = []
    for prefix, module in model.named_modules():
        declared = getattr(module, "_tied_weights_keys", None)
        if not declared:
            continue
        base = f"{prefix}." if prefix else ""
        if isinstance(declared, dict):
            pairs += [(base + str(t), base + str(s)) for t, s in declared.items()]
            continue
        embeddings = getattr(module, "get_input_embeddings", None)
        source = embeddings() if callable(embeddings) else None
        source_name = next((n for n, p in model.named_parameters(remove_duplicate=False)
                            if source is not None and p is getattr(source, "weight", None)), None)
        if source_name is not None:
            pairs += [(base + str(t), source_name) for t in declared if str(t).endswith("weight")]
    return [(t, s) for t, s in pairs if t in names and s in names]


def tied_groups(model: nn.Module) -> list[frozenset[str]]:
    """The parameter names that must stay in one unit: each parameter held under several names
    (identity), joined with the pairs the model declares tied."""
    by_id: dict[int, set[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(param), set()).add(name)
    groups = [names for names in by_id.values()]
    for target, source in _declared_ties(model, set().union(*groups) if groups else set()):
        joined = {target, source}
        for group in [g for g in groups if g & joined]:
            joined |= group
            groups.remove(group)
        groups.append(joined)
    return [frozenset(g) for g in groups if len(g) > 1]


def modules_to_wrap(model: nn.Module, rule: WrapRule) -> list[nn.Module]:
    """The submodules (not the root) to shard on their own, children before parents.

    By size this follows torch's ``size_based_auto_wrap_policy``: a module is wrapped when
    the parameters not already inside a wrapped descendant reach ``min_num_params``;
    attention modules are never split nor wrapped alone (their parameters count into the
    parent), containers without a forward are never wrapped, and a module that holds part of
    a :func:`tied_groups` group but not all of it is never wrapped.
    """
    chosen: list[nn.Module] = []
    groups = tied_groups(model)

    def splits_a_group(prefix: str) -> bool:
        inside = prefix + "."
        return any(0 < sum(n.startswith(inside) for n in g) < len(g) for g in groups)

    def visit(module: nn.Module, prefix: str, is_root: bool) -> int:
        """Post-order walk; returns the parameter count left unwrapped under ``module``."""
        if isinstance(module, _LEAF_MODULES) and rule.min_num_params is not None and not is_root:
            return sum(p.numel() for p in module.parameters())  # counted into its parent
        own = sum(p.numel() for p in module.parameters(recurse=False))
        unwrapped = own + sum(visit(child, f"{prefix}.{name}" if prefix else name, False)
                              for name, child in module.named_children())
        if is_root or isinstance(module, _CONTAINERS) or splits_a_group(prefix):
            return unwrapped
        if rule.min_num_params is None:
            wrap = type(module) in rule.classes
        else:
            wrap = unwrapped >= rule.min_num_params
        if wrap:
            chosen.append(module)
            return 0
        return unwrapped

    visit(model, "", True)
    return chosen
