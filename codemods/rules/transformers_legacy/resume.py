"""4.x's "resume" from a local model folder, to a resume from a Trainer checkpoint only.

The 4.x examples (``run_glue.py`` 4.3-4.5, ``run_speech_recognition_ctc.py`` and
``run_mlm_wwm.py`` up to 4.30) wrote::

    elif os.path.isdir(model_args.model_name_or_path):
        checkpoint = model_args.model_name_or_path
    ...
    trainer.train(resume_from_checkpoint=checkpoint)

4.x took a folder without ``trainer_state.json`` for its weights and a fresh start; 4.36 and
later raise FileNotFoundError (``shardcompat run`` serves it as 4.x did: see
:mod:`shardcompat.transformers._start_from`).  The model was built from that very folder, so
the test becomes ``os.path.isfile(os.path.join(FOLDER, "trainer_state.json"))``: a checkpoint
folder still resumes, a model folder trains from the weights it was built with, as in 4.x.
Only that shape is rewritten: the folder ``isdir`` tests is the value the block assigns to a
name the file passes as ``resume_from_checkpoint=``, or the value of ``FOLDER if
os.path.isdir(FOLDER) else None`` passed or assigned so.  4.2's run_glue wrote the latter as
``trainer.train(model_path=...)``; in a file that imports a ``...Trainer`` from Transformers,
``train(model_path=)`` becomes ``train(resume_from_checkpoint=)`` (4.3-4.x took it so).
"""

from __future__ import annotations

from typing import Any, TypeGuard

import libcst as cst
import libcst.matchers as m

from shardcompat.transformers._start_from import STATE

from ..base import NodeSet, Rule, dotted
from . import RULE, UNMIGRATED

__all__ = ["ModelFolderResume"]

#: The receivers of ``isdir`` that are ``os.path`` as the examples import it.
_PATH_MODULES = ("os.path", "path", "osp")


def _isdir_of(call: cst.Call) -> cst.BaseExpression | None:
    """``FOLDER`` of ``os.path.isdir(FOLDER)``, else None."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "isdir" or len(call.args) != 1:
        return None
    arg = call.args[0]
    if dotted(func.value) not in _PATH_MODULES or arg.keyword is not None or arg.star:
        return None
    return arg.value


class _HasState(cst.CSTTransformer):
    """``isdir(FOLDER)`` to ``isfile(join(FOLDER, "trainer_state.json"))`` for the given folders."""

    def __init__(self, folders: list[cst.BaseExpression]) -> None:
        super().__init__()
        self.folders = folders

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        folder = _isdir_of(original_node)
        if folder is None or not any(folder.deep_equals(f) for f in self.folders):
            return updated_node
        func = updated_node.func
        assert isinstance(func, cst.Attribute)
        state = cst.Arg(cst.SimpleString(f'"{STATE}"'))
        joined = cst.Call(func.with_changes(attr=cst.Name("join")), [updated_node.args[0].with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), state])
        return updated_node.with_changes(func=func.with_changes(attr=cst.Name("isfile")), args=[cst.Arg(joined)])


def _tested(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The folders ``test`` checks with ``os.path.isdir``."""
    return [f for call in m.findall(test, m.Call()) if isinstance(call, cst.Call) for f in [_isdir_of(call)]
            if f is not None]


def _trainer_file(module: cst.Module) -> bool:
    """Whether the file imports a ``...Trainer`` from Transformers (whose ``train`` took ``model_path=``)."""
    return any(isinstance(node, cst.ImportFrom) and node.module is not None
               and dotted(node.module).split(".")[0] == "transformers" and not isinstance(node.names, cst.ImportStar)
               and any(isinstance(a.name, cst.Name) and a.name.value.endswith("Trainer") for a in node.names)
               for node in m.findall(module, m.ImportFrom()))


class ModelFolderResume(Rule):
    """``if os.path.isdir(FOLDER): checkpoint = FOLDER`` (and ``FOLDER if os.path.isdir(FOLDER) else
    None``) resumes only a Trainer checkpoint; ``train(model_path=)`` is ``resume_from_checkpoint=``."""

    DESCRIPTION = "Resume only a folder with trainer_state.json, where 4.x took a model folder for a fresh start."

    def __init__(self, records: Any, module: cst.Module) -> None:
        super().__init__(records, module)
        self.renames_model_path = _trainer_file(module)
        keywords = ("resume_from_checkpoint", "model_path") if self.renames_model_path else ("resume_from_checkpoint",)
        args = [a for a in m.findall(module, m.Arg()) if isinstance(a, cst.Arg) and a.keyword is not None
                and a.keyword.value in keywords]
        self.resumed = {a.value.value for a in args if isinstance(a.value, cst.Name)}
        self.inline = NodeSet()  # FOLDER if isdir(FOLDER) else None, passed or assigned to a resumed name
        for a in args:
            if isinstance(a.value, cst.IfExp):
                self.inline.add(a.value)
        for assign in m.findall(module, m.Assign(value=m.IfExp())):
            if self._assigns_resumed(assign):
                self.inline.add(assign.value)

    def _assigns_resumed(self, node: cst.CSTNode) -> TypeGuard[cst.Assign]:
        """Whether ``node`` assigns to a name the file passes as ``resume_from_checkpoint=``."""
        return isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value in self.resumed
                                                    for t in node.targets)

    def _rewrite(self, original: cst.BaseExpression, updated: cst.BaseExpression,
                 folders: list[cst.BaseExpression]) -> cst.BaseExpression:
        if not folders or self.blocked(original):
            return updated
        test = updated.visit(_HasState(folders))
        assert isinstance(test, cst.BaseExpression)
        self.record(original, test, RULE,
                    f"a folder without {STATE} was weights and a fresh start in 4.x; today's train() resumes "
                    "only a Trainer checkpoint, and the model was built from this folder")
        return test

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        if not self.resumed:
            return updated_node
        assigned = [a.value for a in m.findall(original_node.body, m.Assign())
                    if self._assigns_resumed(a)]
        folders = [f for f in _tested(original_node.test) if any(f.deep_equals(v) for v in assigned)]
        return updated_node.with_changes(test=self._rewrite(original_node.test, updated_node.test, folders))

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.IfExp:
        if original_node not in self.inline:
            return updated_node
        folders = [f for f in _tested(original_node.test) if f.deep_equals(original_node.body)]
        return updated_node.with_changes(test=self._rewrite(original_node.test, updated_node.test, folders))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        func = updated_node.func
        if not self.renames_model_path or not isinstance(func, cst.Attribute) or func.attr.value != "train":
            return updated_node
        return self.rename_keyword(original_node, updated_node, "model_path", "resume_from_checkpoint",
                                   (RULE, UNMIGRATED),
                                   "4.2's name for resume_from_checkpoint (4.3-4.x took it with a warning)",
                                   both="train(model_path=, resume_from_checkpoint=): 4.x took model_path= and ignored "
                                   "the other; today's train() has no model_path")
