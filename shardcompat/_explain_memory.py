"""``shardcompat explain``'s memory flags: count a model's parameters, estimate every backend,
and name the least-sharded option that fits a GPU (the arithmetic is :mod:`shardcompat.planner`)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .memory import zero_model_volume
from .options import ShardingOptions, ShardingOptionsError, parse_options
from .planner import OPTIMIZERS, PRECISIONS, Estimate, Layout, estimate, layout_of, volume

if TYPE_CHECKING:
    from torch import nn

    from .backends import Placement

__all__ = ["EXAMPLES", "MemoryInputError", "add_arguments", "memory_section", "parse_count", "parse_size",
           "render"]

# Least sharded first: the first that fits is the recommendation.
LADDER = ("", "zero_dp_1", "zero_dp_2", "zero_dp_3", "zero_dp_3 offload")
DEFAULT_HEADROOM = 0.2

EXAMPLES = """\
will my model fit?
  shardcompat explain --params 7.5B --nproc 8 --nnodes 8 --gpu-memory 80GB
  shardcompat explain zero_dp_3 --model ./my-model/config.json --nproc 8 --gpu-memory 40GB
  shardcompat explain "zero_dp_3 auto_wrap" --model mypkg.models:build --precision fp32 --json
Bytes are per rank: parameters, gradients, optimizer state (their total), with what offload
keeps in host memory; the rank's device must hold total - host, plus activations and buffers,
which --headroom (default 20% of --gpu-memory) leaves room for.
"""

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_COUNTS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


class MemoryInputError(ShardingOptionsError):
    """A memory size, parameter count or model path that cannot be used (exit 2, no traceback)."""


def parse_size(text: str) -> int:
    """``80GB`` (10^9), ``80GiB`` (2^30), ``512MiB``...: bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match and unit in _UNITS:
        return int(float(match.group(1)) * _UNITS[unit])
    spelled = [u.upper() if len(u) < 3 else f"{u[0].upper()}iB" for u in _UNITS]
    guess = f"{unit[0].upper()}B" if unit[:1] in ("k", "m", "g", "t") else None
    hint = f"; did you mean {match.group(1)}{guess}?" if match and guess else "; e.g. 80GB (GB = 10^9 bytes) or 80GiB"
    raise MemoryInputError(f"--gpu-memory {text!r}: expected a number and a unit, one of {', '.join(spelled)}{hint}",
                           token=text, choices=spelled, suggestion=guess)


def parse_count(text: str) -> int:
    """``7.5B``, ``350M``, ``1.5e9`` or ``124439808``: a parameter count."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]?)\s*", text)
    suffix = match.group(2).lower() if match else ""
    if not match or suffix not in _COUNTS or float(match.group(1)) * _COUNTS[suffix] < 1:
        raise MemoryInputError(f"--params {text!r}: expected a positive count such as 7.5B, 350M, 1.5e9 or "
                               "124439808 (suffixes K, M, B, T)", token=text, choices=["K", "M", "B", "T"])
    return int(float(match.group(1)) * _COUNTS[suffix])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("memory (will my model fit?)")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--params", type=str, metavar="N",
                        help="estimate per-rank memory for N parameters (7.5B, 350M, 124439808)")
    source.add_argument("--model", metavar="PATH",
                        help="count the parameters of a Hugging Face config.json (or a directory holding one) "
                             "or of a Python 'module:factory', on the meta device (nothing allocated)")
    group.add_argument("--precision", choices=tuple(PRECISIONS), default="mixed",
                       help="; ".join(f"{k}: {v.help}" for k, v in PRECISIONS.items()) + " (default mixed)")
    group.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adamw",
                       help="; ".join(f"{k}: {v.help}" for k, v in OPTIMIZERS.items()) + " (default adamw)")
    group.add_argument("--gpu-memory", metavar="SIZE",
                       help="memory of one GPU (80GB = 80e9 bytes, 80GiB accepted): name the least-sharded "
                            "option that fits and what does not fit by how much")
    group.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM, metavar="FRACTION",
                       help="part of --gpu-memory left for activations and buffers "
                            f"(default {DEFAULT_HEADROOM:g})")


def wanted(args: argparse.Namespace) -> bool:
    if args.gpu_memory is not None and args.params is None and args.model is None:
        raise MemoryInputError("--gpu-memory needs the model's size: --params N or --model PATH")
    if not 0 <= args.headroom < 1:
        raise MemoryInputError(f"--headroom {args.headroom:g}: expected a fraction in [0, 1), e.g. 0.2")
    return args.params is not None or args.model is not None


# --------------------------------------------------------------------------- counting a model


def load_model(spec: str) -> nn.Module:
    """The model ``spec`` names, built on the meta device: a ``config.json``, a directory
    holding one, or ``module:factory`` (called with no arguments)."""
    import torch

    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise MemoryInputError(f"--model {spec!r}: no such file (expected config.json or a directory "
                                   "holding one, or module:factory)", token=spec)
        return _hf_model(path)
    module_name, _, factory_name = spec.partition(":")
    if not factory_name:
        raise MemoryInputError(f"--model {spec!r}: expected a config.json, a directory holding one, or "
                               "module:factory (e.g. mypkg.models:build)", token=spec)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise MemoryInputError(f"--model {spec!r}: cannot import {module_name!r}: {error}", token=spec) from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        guess = difflib.get_close_matches(factory_name, names, n=1)
        raise MemoryInputError(f"--model {spec!r}: {module_name} has no callable {factory_name!r}"
                               + (f"; did you mean '{guess[0]}'?" if guess else ""), token=factory_name,
                               choices=names, suggestion=guess[0] if guess else None)
    with torch.device("meta"):
        model = factory()
    if not isinstance(model, torch.nn.Module):
        raise MemoryInputError(f"--model {spec!r}: the factory returned {type(model).__name__}, not a torch module",
                               token=spec)
    return model


def _hf_model(path: Path) -> nn.Module:
    try:
        import transformers
    except ImportError:
        raise MemoryInputError(f"--model {str(path)!r}: reading a config.json needs transformers "
                               "(pip install 'shardcompat[transformers]'), or pass --params N",
                               token=str(path)) from None
    import torch

    config = transformers.AutoConfig.from_pretrained(str(path.parent))
    architectures = getattr(config, "architectures", None) or []
    cls = getattr(transformers, architectures[0], None) if architectures else None
    with torch.device("meta"):
        if cls is not None:
            model: nn.Module = cls(config)
        else:
            try:
                model = transformers.AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
            except ValueError:
                model = transformers.AutoModel.from_config(config)  # type: ignore[no-untyped-call]
    tie = getattr(model, "tie_weights", None)
    if getattr(config, "tie_word_embeddings", False) and callable(tie):
        tie()  # so the shared weight is one parameter, counted once
    return model


# --------------------------------------------------------------------------- the section


def _shard_world(options: ShardingOptions, placement: Placement) -> int:
    """Hybrid sharding shards over one node's ranks; everything else over all of them."""
    return placement.local_world_size if options.hybrid else placement.world_size


def _layout(args: argparse.Namespace, options: ShardingOptions, model: nn.Module | None) -> Layout:
    if model is None:
        return Layout.count(parse_count(args.params))
    return layout_of(model, options)


def _estimate(args: argparse.Namespace, options: ShardingOptions, backend: str, stage: int, placement: Placement,
              model: nn.Module | None) -> Estimate:
    return estimate(options, backend, stage, _layout(args, options, model), _shard_world(options, placement),
                    precision=args.precision, optimizer=args.optimizer)


def _ladder(options: ShardingOptions) -> list[ShardingOptions]:
    """The candidates, least sharded first, keeping the user's other settings where they apply."""
    found = []
    for words in LADDER:
        base = parse_options(words)
        try:
            keep = dataclasses.replace(options, stage=base.stage, offload=base.offload)
        except ShardingOptionsError:
            keep = base
        found.append(keep)
    return found


def memory_section(args: argparse.Namespace, options: ShardingOptions, placement: Placement,
                   rows: list[dict[str, Any]], chosen: str | None, backend_choice: str) -> dict[str, Any]:
    """Add an ``estimate`` to every row that has a plan; the section's JSON fields."""
    from .backends import NoBackendAvailable, resolve

    model = load_model(args.model) if args.model is not None else None
    layout = _layout(args, options, model)
    psi_bytes = layout.parameters * PRECISIONS[args.precision].param
    for row in rows:
        if "call" in row:
            stage = row["effective_stage"]
            row["estimate"] = _estimate(args, options, row["backend"], stage, placement, model).as_dict()
            moved = volume(options, row["backend"], stage, layout, _shard_world(options, placement),
                           precision=args.precision, nnodes=placement.nnodes)
            total = sum(moved.values())
            row["estimate"]["comm"] = {**{k: round(v) for k, v in moved.items()}, "total": round(total),
                                       "zero_model_ratio": round(total / zero_model_volume(stage, psi_bytes), 4)}
    data: dict[str, Any] = {
        "parameters": layout.parameters,
        "exact": layout.exact,
        "memory": {"precision": args.precision, "optimizer": args.optimizer,
                   "sharded_over": _shard_world(options, placement)},
        "estimate": next((r["estimate"] for r in rows if r["backend"] == chosen), None),
    }
    if model is not None and options.auto_wrap:
        data["auto_wrap"] = {"units": list(layout.wrapped),
                             "root_parameters": sum(math.prod(s) for s in layout.units[0])}
    if args.gpu_memory is not None:
        gpu = parse_size(args.gpu_memory)
        budget = gpu * (1 - args.headroom)
        ladder = []
        for candidate in _ladder(options):
            try:
                plan = resolve(candidate, backend_choice, placement)
            except NoBackendAvailable:
                continue
            found = _estimate(args, candidate, plan.backend, plan.zero_stage, placement, model)
            device = found.device + found.working
            ladder.append({"options": str(candidate), "backend": plan.backend, "device": round(device),
                           "host": round(found.host), "fits": device <= budget,
                           "over_by": max(0, round(device - budget))})
        data["fit"] = {"gpu_memory": gpu, "headroom": args.headroom, "budget": round(budget), "options": ladder}
        data["recommended"] = next((c["options"] for c in ladder if c["fits"]), None)
    return data


def _gb(n: float) -> str:
    if n == 0:
        return "0"
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def render(data: dict[str, Any], rows: list[dict[str, Any]], chosen: str | None) -> list[str]:
    """The text lines of the section."""
    memory = data["memory"]
    lines = [f"\nmemory per rank: {data['parameters']:,} parameters, {memory['precision']} with {memory['optimizer']}, "
             f"sharded over {memory['sharded_over']} rank(s) (GB = 10^9 bytes)"]
    if "auto_wrap" in data:
        units = data["auto_wrap"]["units"]
        lines.append(f"auto_wrap wraps {len(units)} module(s)"
                     + (f": {', '.join(units[:4])}{', ...' if len(units) > 4 else ''}" if units else "")
                     + f"; the root unit keeps {data['auto_wrap']['root_parameters']:,} parameters")
    lines.append(f"  {'backend':<15} {'params':>10} {'grads':>10} {'optimizer':>10} {'total':>10} "
                 f"{'on host':>10}  {'peak':<14} {'comm/step (vs ZeRO model)':>26}")
    for row in rows:
        if "estimate" not in row:
            continue
        e = row["estimate"]
        mark = "*" if row["backend"] == chosen else " "
        lines.append(f"{mark} {row['backend']:<15} {_gb(e['params']):>10} {_gb(e['grads']):>10} "
                     f"{_gb(e['optimizer']):>10} {_gb(e['total']):>10} {_gb(e['host']):>10}  {e['phase']:<14} "
                     f"{_gb(e['comm']['total']):>17} ({e['comm']['zero_model_ratio']:.2f}x)")
    fit = data.get("fit")
    if fit:
        lines.append(f"\nfits in {_gb(fit['gpu_memory'])} per GPU, leaving {fit['headroom']:.0%} for activations "
                     f"and buffers (budget {_gb(fit['budget'])} of state on the device"
                     + (", with zero_dp_3's largest gathered unit):" if "auto_wrap" in data or data.get("exact")
                        else "; with --params alone one gathered unit is taken as small, as the ZeRO paper does):"))
        for c in fit["options"]:
            verdict = "fits" if c["fits"] else f"over by {_gb(c['over_by'])}"
            host = f" + {_gb(c['host'])} on host" if c["host"] else ""
            lines.append(f"  {c['options'] or '(plain DDP)':<28} {c['backend']:<14} {_gb(c['device']):>10}{host}  {verdict}")
        recommended = data["recommended"]
        lines.append(f"recommended: {recommended!r}" if recommended is not None and recommended else
                     "recommended: plain DDP (no sharding needed)" if recommended == "" else
                     "recommended: none fits; more ranks, a smaller model or more GPU memory")
    return lines
