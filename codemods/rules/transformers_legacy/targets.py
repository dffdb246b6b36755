"""The tokenizer's 4.x target mode, ``with tokenizer.as_target_tokenizer():``, to ``text_target=``.

A block whose every statement is ``name = tokenizer(texts, ...)`` (the 4.x examples' label
encoding) becomes ``name = tokenizer(text_target=texts, ...)``: 5.x's tokenizer switches into the
same target mode for ``text_target``, which is what the table's row serves at run time.  Any
other block, and ``prepare_seq2seq_batch`` (whose two encodings need a person to split), are
reported with the table's replacement.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from shardcompat.transformers.legacy_table import SURFACE

from ..base import Rule, dotted
from . import RULE, UNMIGRATED

__all__ = ["TargetTokenizer"]

_ROWS = {r.pattern.rsplit(".", 1)[-1]: r for r in SURFACE if r.pattern.startswith("PreTrainedTokenizerBase.")}



def _target_mode(with_node: cst.With) -> str | None:
    """The tokenizer of ``with TOKENIZER.as_target_tokenizer():`` (one item, no ``as``), else None."""
    if len(with_node.items) != 1 or with_node.items[0].asname is not None or with_node.asynchronous:
        return None
    call = with_node.items[0].item
    if not isinstance(call, cst.Call) or call.args or not isinstance(call.func, cst.Attribute):
        return None
    if call.func.attr.value != "as_target_tokenizer":
        return None
    return dotted(call.func.value) or None


def _encode(statement: cst.BaseStatement, tokenizer: str) -> cst.SimpleStatementLine | None:
    """``x = tokenizer(texts, ...)`` with ``text_target=texts``, or None for any other statement."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
        return None
    call = assign.value
    if dotted(call.func) != tokenizer or not call.args:
        return None
    first = call.args[0]
    if first.keyword is not None or first.star or any(a.keyword is not None and a.keyword.value == "text_target"
                                                      for a in call.args):
        return None
    keyword = first.with_changes(keyword=cst.Name("text_target"), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
    return statement.with_changes(body=[assign.with_changes(value=call.with_changes(args=[keyword, *call.args[1:]]))])


class TargetTokenizer(Rule):
    """``as_target_tokenizer()`` blocks to ``text_target=``; ``prepare_seq2seq_batch`` reported."""

    DESCRIPTION = "Encode labels with text_target= instead of the 4.x as_target_tokenizer() block."

    def leave_With(self, original_node: cst.With, updated_node: cst.With) -> Any:
        tokenizer = _target_mode(updated_node)
        if tokenizer is None or self.blocked(original_node):
            return updated_node
        row = _ROWS["as_target_tokenizer"]
        body = updated_node.body
        statements = list(body.body) if isinstance(body, cst.IndentedBlock) else []
        encoded = [_encode(s, tokenizer) for s in statements]
        if not statements or any(e is None for e in encoded):
            self.flag(original_node, UNMIGRATED, f"{tokenizer}.as_target_tokenizer(): removed in Transformers 5.x; "
                      "the block holds more than label encodings", hint=f"write {row.replacement}")
            return updated_node
        lines = [e for e in encoded if e is not None]
        lines[0] = lines[0].with_changes(leading_lines=[*updated_node.leading_lines, *lines[0].leading_lines])
        self.record(original_node, "\n".join(self.module.code_for_node(n).strip() for n in lines), RULE,
                    f"{row.reason} ({row.replacement})")
        return cst.FlattenSentinel(lines)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        func = updated_node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "prepare_seq2seq_batch":
            row = _ROWS["prepare_seq2seq_batch"]
            self.flag(original_node, UNMIGRATED, "prepare_seq2seq_batch: removed in Transformers 5.x; "
                      f"{row.reason}", hint=f"write {row.replacement}")
        return updated_node
