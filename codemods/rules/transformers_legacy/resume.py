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
name the file passes as ``resume_from_checkpoint=``.
"""

from __future__ import annotations

from typing import Any

import libcst as cst
import libcst.matchers as m

from shardcompat.transformers._start_from import STATE

from ..base import Rule, dotted

__all__ = ["ModelFolderResume"]

RULE = "transformers-legacy"
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


class ModelFolderResume(Rule):
    """``if os.path.isdir(FOLDER): checkpoint = FOLDER`` resumes only a Trainer checkpoint."""

    DESCRIPTION = "Resume only a folder with trainer_state.json, where 4.x took a model folder for a fresh start."

    def __init__(self, records: Any, module: cst.Module) -> None:
        super().__init__(records, module)
        self.resumed = {arg.value.value for arg in m.findall(module, m.Arg(keyword=m.Name("resume_from_checkpoint"),
                                                                          value=m.Name()))
                        if isinstance(arg, cst.Arg) and isinstance(arg.value, cst.Name)}

    def _folders(self, node: cst.If) -> list[cst.BaseExpression]:
        """The folders the test checks with ``isdir`` and the block assigns to a resumed name."""
        tested = [f for call in m.findall(node.test, m.Call()) if isinstance(call, cst.Call)
                  for f in [_isdir_of(call)] if f is not None]
        assigned = [a.value for a in m.findall(node.body, m.Assign()) if isinstance(a, cst.Assign)
                    and any(isinstance(t.target, cst.Name) and t.target.value in self.resumed for t in a.targets)]
        return [f for f in tested if any(f.deep_equals(v) for v in assigned)]

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        if not self.resumed:
            return updated_node
        folders = self._folders(original_node)
        if not folders or self.blocked(original_node.test):
            return updated_node
        test = updated_node.test.visit(_HasState(folders))
        assert isinstance(test, cst.BaseExpression)
        self.record(original_node.test, test, RULE,
                    f"a folder without {STATE} was weights and a fresh start in 4.x; today's train() resumes "
                    "only a Trainer checkpoint, and the model was built from this folder")
        return updated_node.with_changes(test=test)
