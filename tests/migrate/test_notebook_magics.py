"""Notebook cells by what their magics run: shell rules, Python rules, or left alone with a
warning; a cell that does not parse stays byte-identical."""

from __future__ import annotations

import json

import pytest

from codemods.formats.notebook import rewrite_notebook
from codemods.formats.python import python_hook
from codemods.formats.spans import apply_spans
from codemods.run.context import Settings


def migrate_cell(source: str) -> tuple[str, list[str]]:
    """The cell's new source and the rules of the warnings."""
    text = json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                  "source": source.splitlines(keepends=True)}]}, indent=1)
    found = rewrite_notebook(text, Settings(), python_hook(Settings()))
    new = json.loads(apply_spans(text, found.edits))
    return "".join(new["cells"][0]["source"]), [i.rule for i in found.issues]


@pytest.mark.parametrize(("before", "after"), [
    ("!python train.py --sharded_ddp\n", "!python train.py --sharded_ddp simple\n"),
    ("!!python train.py --sharded_ddp true\n", "!!python train.py --sharded_ddp simple\n"),
    ("%run train.py --sharded_ddp --fp16\n", "%run train.py --sharded_ddp simple --fp16\n"),
    ("out = !python train.py --sharded_ddp\n", "out = !python train.py --sharded_ddp simple\n"),
    ("t = %time TrainingArguments(sharded_ddp=True)\n", 't = %time TrainingArguments(sharded_ddp="simple")\n'),
    ("%system python train.py --sharded_ddp=no\n", "%system python train.py\n"),
    ("%sx echo --sharded_ddp\n", "%sx echo --sharded_ddp\n"),  # echo text, as in shell scripts
    ("%time a = TrainingArguments(sharded_ddp=True)\n", '%time a = TrainingArguments(sharded_ddp="simple")\n'),
    ("if x:\n    %prun f(TrainingArguments(sharded_ddp=False))\n",
     'if x:\n    %prun f(TrainingArguments(sharded_ddp=""))\n'),
    ("%%script bash\npython train.py --sharded_ddp\n", "%%script bash\npython train.py --sharded_ddp simple\n"),
    ("%%script /bin/sh\npython t.py --sharded_ddp 1\n", "%%script /bin/sh\npython t.py --sharded_ddp simple\n"),
    ("%%sh\npython t.py --sharded_ddp\n", "%%sh\npython t.py --sharded_ddp simple\n"),
    ("%%capture out\nTrainingArguments(sharded_ddp=True)\n", '%%capture out\nTrainingArguments(sharded_ddp="simple")\n'),
    ("%%time\n!python t.py --sharded_ddp\n", "%%time\n!python t.py --sharded_ddp simple\n"),
    ("%%capture\n%%bash\npython t.py --sharded_ddp\n", "%%capture\n%%bash\npython t.py --sharded_ddp simple\n"),
    ("%%python3\nargv = ['--sharded_ddp']\n", "%%python3\nargv = ['--sharded_ddp', 'simple']\n"),
    ("%%capture\r\nTrainingArguments(sharded_ddp=True)\r\n", '%%capture\r\nTrainingArguments(sharded_ddp="simple")\r\n'),
])
def test_magics_get_the_right_rules(before: str, after: str) -> None:
    assert migrate_cell(before) == (after, [])
    assert migrate_cell(after) == (after, [])


@pytest.mark.parametrize(("source", "rules"), [
    ("%%html\n<pre>python train.py --sharded_ddp</pre>\n", ["unknown-magic"]),
    ("%%script ruby\nputs '--sharded_ddp'\n", ["unknown-magic"]),
    ("%%writefile args.txt\n--sharded_ddp\n", ["unknown-magic"]),
    ("%env ARGS=--sharded_ddp\nx = 1\n", ["unknown-magic"]),
    ("%timeit -n1 TrainingArguments(sharded_ddp=True)\n", ["unknown-magic"]),
    ("x = = 1\n!python train.py --sharded_ddp\n", ["not-parsed"]),  # the ! line is not rewritten either
    ("%%capture\nx = (\n!python train.py --sharded_ddp\n", ["not-parsed"]),
])
def test_what_cannot_be_read_is_left_alone_and_said(source: str, rules: list[str]) -> None:
    assert migrate_cell(source) == (source, rules)


def test_each_edit_is_reported_once() -> None:
    from codemods.run.engine import Job, process_file

    from .fixtures import ROOT

    path = ROOT / "notebook_magics" / "before.ipynb"
    report = process_file(Job(str(path), path.name, "notebook", Settings()))
    assert report.edits and all(e.rule != "notebook-cell" for e in report.edits)
    assert len({(e.line, e.rule, e.before) for e in report.edits}) == len(report.edits)
