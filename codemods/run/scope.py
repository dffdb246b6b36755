"""Evidence rules: edit only where the tree shows the usage targets Transformers.

Per repository root: *evidence* is an import of ``transformers``, ``TrainingArguments`` or
``HfArgumentParser`` in Python or a notebook, or ``transformers`` in a requirements file,
``setup.py``/``setup.cfg``/``pyproject.toml``/``environment.yml``/``Pipfile``.  ESPnet in the same
places marks the repository as ESPnet's.

Per file: *counter-evidence* is another framework's own ``sharded_ddp``: a local boolean
definition of ``--sharded_ddp`` (``type=str2bool``/``type=bool``), an ESPnet import, or an
ESPnet-style config.  Serialized outputs (result JSON, trainer state) are never edited.

A file with evidence in its repository and no counter-evidence is edited; any other file's
findings are reported (``--scope all`` edits them too): as ``review`` without evidence (legacy
usage until shown otherwise: ``--check`` fails), as ``foreign`` with counter-evidence (another
framework's own flag: listed, but ``--check`` passes).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

__all__ = ["Evidence", "decide", "is_output"]

_REQUIREMENT_FILES = re.compile(
    r"^(requirements.*\.(txt|in)|setup\.py|setup\.cfg|pyproject\.toml|environment.*\.ya?ml|Pipfile|"
    r"conda.*\.ya?ml)$", re.I)
_HF_CODE = re.compile(rb"(?:from|import)\s+transformers\b|\bHfArgumentParser\b|\bTrainingArguments\b")
_ESPNET_CODE = re.compile(rb"(?:from|import)\s+espnet2?\b")
_WORD = {"transformers": re.compile(rb"(?i)\btransformers\b"), "espnet": re.compile(rb"(?i)\bespnet2?\b")}
_LOCAL_BOOL = re.compile(
    rb"add_argument\(\s*(?:[\"'][^\"']*[\"']\s*,\s*)*[\"']--sharded_ddp[\"'][^)]*?"
    rb"type\s*=\s*(?:str2bool|strtobool|bool|distutils\.util\.strtobool|lambda)", re.S)
_ESPNET_KEYS = re.compile(rb"(?m)^\s*(encoder_conf|decoder_conf|frontend_conf|batch_type|accum_grad|"
                          rb"model_conf|specaug_conf|normalize_conf|token_type)\s*:")
_OUTPUT_NAME = re.compile(r"(results?|trainer_state|.*_state|eval_.*|predict.*|metrics|all_results)"
                          r"(_[\w.-]*)?\.json$", re.I)
_OUTPUT_DIRS = frozenset({"runs", "wandb", "mlruns", "outputs", "output", "logs", "lightning_logs"})
_CODE_SUFFIXES = (".py", ".ipynb")


@dataclass
class Evidence:
    """What one repository root shows; fill it with :meth:`observe`."""

    transformers: list[str] = field(default_factory=list)
    espnet: list[str] = field(default_factory=list)
    local_definitions: set[str] = field(default_factory=set)

    def observe(self, path: str, data: bytes) -> None:
        """Look at one file's bytes (cheap needles first, regexes only on hits)."""
        name = os.path.basename(path)
        code = name.endswith(_CODE_SUFFIXES)
        listing = _REQUIREMENT_FILES.match(name) is not None
        hf = b"transformers" in data or b"TrainingArguments" in data or b"HfArgumentParser" in data
        if hf and ((code and _HF_CODE.search(data)) or (listing and _WORD["transformers"].search(data))):
            self.transformers.append(path)
        if b"espnet" in data and ((code and _ESPNET_CODE.search(data)) or (listing and _WORD["espnet"].search(data))):
            self.espnet.append(path)
        if code and b"sharded_ddp" in data and _LOCAL_BOOL.search(data):
            self.local_definitions.add(path)

    @property
    def local_scripts(self) -> frozenset[str]:
        """Names by which commands run the scripts that define their own boolean flag."""
        names = set()
        for path in self.local_definitions:
            base = os.path.basename(path)
            names.add(base)
            if base == "__main__.py":
                names.add(os.path.basename(os.path.dirname(path)))
        return frozenset(names)


def is_output(path: str) -> bool:
    """Serialized outputs (result JSON, trainer state, run folders): never edited, not reported."""
    parts = path.replace(os.sep, "/").split("/")
    if not path.endswith(".json"):
        return False
    return bool(_OUTPUT_NAME.match(parts[-1])) or any(
        p in _OUTPUT_DIRS or p.startswith("checkpoint-") for p in parts[:-1]
    )


def decide(path: str, kind: str, data: bytes, evidence: Evidence) -> tuple[str, str]:
    """``("edit", "")``, ``("review", reason)`` (no evidence) or ``("foreign", reason)``
    (counter-evidence) for one file."""
    if path in evidence.local_definitions:
        return "foreign", "this file defines its own boolean --sharded_ddp (str2bool/type=bool)"
    if kind in ("python", "notebook") and _ESPNET_CODE.search(data):
        return "foreign", "this file uses ESPnet, which has its own boolean sharded_ddp"
    if kind in ("yaml", "json", "toml", "ini") and _ESPNET_KEYS.search(data):
        return "foreign", "an ESPnet-style config: its sharded_ddp is ESPnet's own boolean"
    if not evidence.transformers:
        return "review", "no evidence that this repository uses Transformers"
    if evidence.espnet and not (kind in ("python", "notebook") and _HF_CODE.search(data)):
        return "foreign", "this repository uses ESPnet, whose sharded_ddp is its own boolean"
    return "edit", ""
