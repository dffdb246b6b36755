"""Fixture discovery and the single rewrite entry point the fixture tests use."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from codemods.formats.kinds import detect_kind
from codemods.run.context import Settings
from codemods.run.engine import Job, process_file
from codemods.run.report import FileReport

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "migrate"


@dataclass(frozen=True)
class Case:
    """``before`` and the expected ``after`` (the same file for a no-op ``same.*`` case)."""

    name: str
    before: Path
    after: Path
    settings: Settings
    warnings: tuple[str, ...] | None

    @property
    def noop(self) -> bool:
        return self.before == self.after


def cases() -> list[Case]:
    found = []
    for folder in sorted(p for p in ROOT.iterdir() if p.is_dir()):
        options = json.loads((folder / "case.json").read_text()) if (folder / "case.json").exists() else {}
        warnings = (folder / "warnings.json")
        expected = tuple(json.loads(warnings.read_text())) if warnings.exists() else None
        settings = Settings(**options)
        same = [p for p in folder.iterdir() if p.name.split(".")[0] == "same"]
        if same:
            found.append(Case(folder.name, same[0], same[0], settings, expected))
            continue
        before = next(p for p in folder.iterdir() if p.name.split(".")[0] == "before")
        after = folder / before.name.replace("before", "after", 1)
        found.append(Case(folder.name, before, after, settings, expected))
    return found


def rewrite(source: Path, settings: Settings, workdir: Path) -> tuple[bytes, FileReport]:
    """Rewrite a copy of ``source`` (named like it, so the kind is detected the same way)."""
    target = workdir / source.name.replace("after", "before", 1)
    shutil.copyfile(source, target)
    kind = detect_kind(str(target), target.read_bytes()[:200])
    assert kind is not None, f"{source.name}: no kind detected"
    report = process_file(Job(str(target), target.name, kind, settings))
    data = report.new_data if report.new_data is not None else target.read_bytes()
    return data, report
