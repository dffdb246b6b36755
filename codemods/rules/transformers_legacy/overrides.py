"""``Trainer`` subclasses written for Transformers 4.2x-4.30, moved to today's override protocol.

The table is :data:`shardcompat.transformers._overrides.PROTOCOL`, the one ``shardcompat run``
serves them by, so what runs unchanged and what migrates cannot disagree.  In a class whose base
is a ``...Trainer`` (or a class of the same file that is one):

- an override in a 4.x form (the same test the runtime makes) takes today's parameters, in
  today's order, under the names it gave the 4.x ones: ``compute_loss(..., num_items_in_batch=None)``,
  ``training_step(self, model, inputs, num_items_in_batch=None)``, ``_get_train_sampler(self,
  train_dataset=None)``, ``log(self, logs, start_time=None)``...; a 4.x parameter today's release no
  longer passes (``_save_checkpoint``'s ``metrics``) goes where only ``super()`` read it, and is
  kept and reported where the body reads it;
- its ``super().method(...)`` call in the 4.x form passes today's arguments on (``log(logs,
  start_time)``), as the runtime completes it;
- a 4.x ``compute_loss`` returns a per-batch mean, as 4.x's training loop expected: the class
  gets ``loss_is_scaled_for_ga = False`` so today's ``training_step`` divides it by the
  accumulation steps as 4.x did;
- a 4.x ``create_optimizer`` reads ``self.model``, which 4.x had set to the model the optimizer is
  for: it reads the ``model`` today's release passes, when it passes one;
- ``...Trainer(...)`` with more than seven positional arguments (4.x's order put
  ``compute_metrics`` eighth) takes them by keyword;
- what needs a person is reported: the 4.x internals (``self.sharded_ddp``, ``self.scaler``,
  ``ShardedDDPOption``...), a ``training_step`` that calls ``backward`` itself.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Union

import libcst as cst

from shardcompat.transformers._overrides import Change, Served, by_method, signature_text
from shardcompat.transformers.legacy_table import MEMBERS

from ..base import Rule, dotted
from . import RULE, UNMIGRATED
from .plans import MEMBER_RENAMES

__all__ = ["TrainerOverrides"]

_INIT_POSITIONAL = 7  # 4.x and today agree on the first seven Trainer(...) parameters
_TODAY_KEYWORD = {"tokenizer": "processing_class"}
#: 4.x Trainer internals a subclass read, and today's replacement (from the table's rows).
_INTERNALS: dict[str, str] = {r.pattern.split(".", 1)[1]: r.replacement for r in MEMBERS
                              if r.pattern.startswith("*Trainer.") and "(" not in r.pattern}
_SCALED = "loss_is_scaled_for_ga"



def _owner(bases: list[str], local: dict[str, str]) -> str | None:
    """``Seq2SeqTrainer`` or ``Trainer`` when a base is one (or a local subclass of one), else None."""
    for base in bases:
        last = base.rsplit(".", 1)[-1]
        if last in local:
            return local[last]
        if last == "Seq2SeqTrainer":
            return last
        if last.endswith("Trainer"):
            return "Trainer"
    return None


class _Names(cst.CSTVisitor):
    """Every bare name a function body uses or binds (nested scopes included: a superset is safe);
    not attribute names or call keywords."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}

    def visit_Name(self, node: cst.Name) -> None:
        self.names[node.value] = self.names.get(node.value, 0) + 1

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def _names(node: cst.CSTNode) -> dict[str, int]:
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


@dataclass
class _Class:
    owner: str | None
    scaled: bool = False  # the class sets loss_is_scaled_for_ga itself
    needs_scaled: bool = False


@dataclass
class _Method:
    change: Change
    legacy: bool
    static: bool
    cls: _Class
    #: the override's parameter for each 4.x parameter name (for its super() call)
    given: dict[str, str] = field(default_factory=dict)
    removed_read: set[str] = field(default_factory=set)
    names: dict[str, int] = field(default_factory=dict)


Scope = Union[_Class, _Method, None]


def _is_super(func: cst.BaseExpression) -> str | None:
    """``m`` for ``super().m`` / ``super(Cls, self).m``."""
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
        inner = func.value.func
        if isinstance(inner, cst.Name) and inner.value == "super":
            return func.attr.value
    return None


def _bind(parameters: list[inspect.Parameter], args: list[cst.Arg]) -> dict[str, cst.Arg] | None:
    """The call's arguments by the parameter they fill, or None when they do not fit (``*``/``**`` too)."""
    names = [p.name for p in parameters if p.kind is not p.VAR_KEYWORD]
    out: dict[str, cst.Arg] = {}
    position = 0
    for arg in args:
        if arg.star:
            return None
        if arg.keyword is None:
            if position >= len(names):
                return None
            out[names[position]] = arg
            position += 1
        elif arg.keyword.value in names and arg.keyword.value not in out:
            out[arg.keyword.value] = arg
        else:
            return None
    return out


def _arg(value: cst.BaseExpression, keyword: str | None) -> cst.Arg:
    if keyword is None:
        return cst.Arg(value)
    return cst.Arg(value, keyword=cst.Name(keyword), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))


def _call_args(order: list[str], values: dict[str, cst.BaseExpression], positional_ok: set[str]) -> list[cst.Arg]:
    """Arguments in ``order``: positional while each fills the next place, keywords after."""
    out: list[cst.Arg] = []
    positional = True
    for name in order:
        if name not in values:
            positional = False
            continue
        positional = positional and name in positional_ok
        out.append(_arg(values[name], None if positional else name))
    return [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in out]


def _default(p: inspect.Parameter) -> cst.BaseExpression | None:
    if p.default is inspect.Parameter.empty:
        return None
    return cst.parse_expression(repr(p.default))


class TrainerOverrides(Rule):
    """4.x ``Trainer`` overrides, their ``super()`` calls and positional ``Trainer`` arguments to today's form."""

    DESCRIPTION = "Move Trainer subclasses written for Transformers 4.x to today's override signatures."

    def __init__(self, records: Any, module: cst.Module) -> None:
        super().__init__(records, module)
        self.scopes: list[Scope] = []
        self.trainers: dict[str, str] = {}  # classes of this file that are Trainers -> owner
        self.scaled: set[str] = set()  # classes of this file that set loss_is_scaled_for_ga
        self.in_target = 0  # inside an assignment target (self.model = ... stays)
        self.reported: set[int] = set()  # lines with a needs-a-person report (one a line)

    # ------------------------------------------------------------------ scopes
    def _method(self) -> _Method | None:
        for scope in reversed(self.scopes):
            if isinstance(scope, _Method):
                return scope
            if isinstance(scope, _Class):
                return None
        return None

    def _class(self) -> _Class | None:
        for scope in reversed(self.scopes):
            if isinstance(scope, _Class):
                return scope
        return None

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        bases = [dotted(a.value) for a in node.bases if a.keyword is None]
        owner = _owner(bases, self.trainers)
        scaled = any(b.rsplit(".", 1)[-1] in self.scaled for b in bases)
        if owner is not None and isinstance(node.body, cst.IndentedBlock):
            for statement in node.body.body:
                if isinstance(statement, cst.SimpleStatementLine):
                    for small in statement.body:
                        targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                                   else [small.target] if isinstance(small, cst.AnnAssign) else [])
                        scaled = scaled or any(dotted(t) == _SCALED for t in targets)
        self.scopes.append(_Class(owner, scaled=scaled))

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        scope = self.scopes.pop()
        assert isinstance(scope, _Class)
        if scope.owner is None:
            return updated_node
        self.trainers[original_node.name.value] = scope.owner
        if scope.scaled or scope.needs_scaled:
            self.scaled.add(original_node.name.value)
        body = updated_node.body
        if not (scope.needs_scaled and not scope.scaled and isinstance(body, cst.IndentedBlock)):
            return updated_node
        # before the compute_loss override, as a reader looks for it there
        at = next(i for i, s in enumerate(body.body)
                  if isinstance(s, cst.FunctionDef) and s.name.value == "compute_loss")
        line = cst.parse_statement(f"{_SCALED} = False  # compute_loss returns a per-batch mean, as in 4.x\n")
        assert isinstance(line, cst.SimpleStatementLine)
        first = body.body[at]
        assert isinstance(first, cst.FunctionDef)
        line = line.with_changes(leading_lines=first.leading_lines)
        new_first = first.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.record(original_node.name, f"{_SCALED} = False", RULE,
                    "today's training_step divides compute_loss's loss by the accumulation steps only when told "
                    "it is a per-batch mean, which a 4.x compute_loss returns", before="")
        return updated_node.with_changes(body=body.with_changes(
            body=[*body.body[:at], line, new_first, *body.body[at + 1:]]))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        parent = self.scopes[-1] if self.scopes else None
        scope: Scope = None
        if isinstance(parent, _Class) and parent.owner is not None:
            change = by_method(parent.owner).get(node.name.value)
            if change is not None and change.method != "__init__" and change.served is Served.ADAPTED:
                static = any(dotted(d.decorator) == "staticmethod" for d in node.decorators)
                legacy = self._is_legacy(change, node, static) and not self.blocked(node.params)
                scope = _Method(change, legacy, static, parent, names=_names(node.body))
                if scope.legacy:
                    scope.legacy = self._plan_method(scope, node)
        self.scopes.append(scope)

    def _is_legacy(self, c: Change, node: cst.FunctionDef, static: bool) -> bool:
        """The runtime's test (:func:`~shardcompat.transformers._overrides.is_legacy`) on the source."""
        p = node.params
        if static != c.static or p.posonly_params or p.kwonly_params or p.star_kwarg is not None \
                or isinstance(p.star_arg, cst.Param):
            return False
        names = [q.name.value for q in p.params][0 if static else 1:]
        if any(n in names for n in c.removed):
            return True
        return len(names) < len(c.parameters("today")) and not all(n in names for n in c.new)

    def _plan_method(self, scope: _Method, node: cst.FunctionDef) -> bool:
        """What the override's 4.x parameters are called; False (reported) when today's names clash."""
        c = scope.change
        legacy = [p.name for p in c.parameters("legacy") if p.kind is not p.VAR_KEYWORD]
        own = [q.name.value for q in node.params.params][0 if scope.static else 1:]
        scope.given = {name: own[i] for i, name in enumerate(legacy) if i < len(own)}
        clash = [n for n in c.new if n in scope.names or n in own]
        if clash:
            self.flag(node, UNMIGRATED,
                      f"{c.method}: the override already uses the name {clash[0]!r}, today's parameter; "
                      f"left in the 4.x form", hint=f"write def {c.method}{signature_text(c.parameters('today'))}")
            return False
        for name in scope.change.removed:
            local = scope.given.get(name)
            if local is not None and scope.names.get(local, 0) > self._super_reads(node, scope.change.method, local):
                scope.removed_read.add(local)
        return True

    @staticmethod
    def _super_reads(node: cst.FunctionDef, method: str, local: str) -> int:
        """How often ``local`` appears in the arguments of ``super().method(...)`` calls."""
        count = 0

        class _Calls(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                nonlocal count
                if _is_super(call.func) == method:
                    count += sum(_names(a.value).get(local, 0) for a in call.args)

        node.body.visit(_Calls())
        return count

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        scope = self.scopes.pop()
        if not isinstance(scope, _Method) or not scope.legacy:
            return updated_node
        c = scope.change
        params = self._parameters(scope, updated_node.params)
        new = updated_node.with_changes(params=params)
        self.record(original_node.params, params, RULE,
                    f"today's release calls {c.method}{signature_text(c.parameters('today'))}")
        for local in sorted(scope.removed_read):
            self.flag(original_node, UNMIGRATED,
                      f"{c.method}: today's release calls it without {local}, which the body reads: it is None "
                      f"here now", hint=self._removed_hint(c))
        if c.method == "compute_loss":
            scope.cls.needs_scaled = True
        if c.method == "training_step" and "accelerator.backward" in self.module.code_for_node(original_node.body):
            self.flag(original_node, UNMIGRATED,
                      "training_step calls accelerator.backward itself: 4.x's Accelerator divided the loss by the "
                      "gradient accumulation steps there, today's does not",
                      hint="divide the loss by self.current_gradient_accumulation_steps before backward")
        return new

    @staticmethod
    def _removed_hint(c: Change) -> str:
        if c.method == "_save_checkpoint":
            return "read this step's evaluation from self.state.log_history (or override _evaluate)"
        return f"write def {c.method}{signature_text(c.parameters('today'))}"

    def _parameters(self, scope: _Method, params: cst.Parameters) -> cst.Parameters:
        c = scope.change
        own = list(params.params)
        head, rest = ([], own) if scope.static else (own[:1], own[1:])
        legacy = [p.name for p in c.parameters("legacy") if p.kind is not p.VAR_KEYWORD]
        by_name = {name: rest[i] for i, name in enumerate(legacy) if i < len(rest)}
        out: list[cst.Param] = []
        defaulted = False
        for p in c.parameters("today"):
            if p.kind is p.VAR_KEYWORD:
                continue
            if p.name in by_name:
                param = by_name[p.name]
            elif p.name in legacy:
                continue  # the override never took it (nor in 4.x)
            else:
                default = _default(p)
                if default is None and defaulted:
                    default = cst.Name("None")
                param = cst.Param(cst.Name(p.name), default=default,
                                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                        whitespace_after=cst.SimpleWhitespace(""))
                                  if default is not None else cst.MaybeSentinel.DEFAULT)
            defaulted = defaulted or param.default is not None
            out.append(param)
        for name in c.removed:  # kept only where the body reads it, then always None
            kept = by_name.get(name)
            if kept is not None and kept.name.value in scope.removed_read:
                if kept.default is None:
                    kept = kept.with_changes(default=cst.Name("None"), equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
                out.append(kept)
        out += rest[len(legacy):]  # the override's own extra parameters, last as before
        last_comma = own[-1].comma if own else cst.MaybeSentinel.DEFAULT
        tidy = [p.with_changes(comma=cst.MaybeSentinel.DEFAULT) for p in [*head, *out]]
        if tidy and isinstance(last_comma, cst.Comma) and own and own[-1] in (head + out):
            tidy[-1] = tidy[-1].with_changes(comma=last_comma)
        return params.with_changes(params=tidy)

    # ------------------------------------------------------------------ calls
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        method = _is_super(updated_node.func)
        if method is not None:
            return self._super(original_node, updated_node, method)
        func = dotted(updated_node.func)
        last = func.rsplit(".", 1)[-1]
        if last.endswith("Trainer") or last in self.trainers:
            return self._constructor(original_node, updated_node, self.trainers.get(last, "Trainer"))
        return updated_node

    def _super(self, original: cst.Call, updated: cst.Call, method: str) -> cst.BaseExpression:
        scope = self._method()
        cls = self._class()
        if cls is None or cls.owner is None:
            return updated
        if method == "__init__":  # a subclass's own __init__ passing 4.x arguments on
            return self._constructor(original, self._tokenizer_keyword(original, updated), cls.owner)
        c = by_method(cls.owner).get(method)
        if c is None or c.served is not Served.ADAPTED or c.method == "__init__" or c.today is None:
            return updated
        given = _bind(c.parameters("legacy"), list(updated.args))
        if given is None:
            return updated
        same = scope is not None and scope.legacy and scope.change.method == method
        today_names = [p.name for p in c.parameters("today") if p.kind is not p.VAR_KEYWORD]
        values = {name: arg.value for name, arg in given.items() if name in today_names}
        if same and method != "compute_loss":  # a 4.x compute_loss's own loss stays a per-batch mean
            assert scope is not None
            for name in c.new:
                if name not in values:
                    values[name] = cst.Name(name)
        dropped = [name for name in c.removed if name in given]
        missing = [p.name for p in c.parameters("today")
                   if p.name not in values and p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD]
        if missing:
            self.flag(original, UNMIGRATED, f"super().{method}(...) in the 4.x form lacks today's {missing[0]}",
                      hint=f"pass {', '.join(missing)} as today's release does ({c.how})")
            return updated
        if not dropped and len(values) == len(given):
            return updated
        positional = {name for name, arg in given.items() if arg.keyword is None} | set(c.new)
        args = _call_args(today_names, values, positional)
        if self.blocked(original):
            return updated
        new = updated.with_changes(args=args)
        self.record(original, new, RULE, f"today's {c.method}{signature_text(c.parameters('today'))}")
        return new

    def _tokenizer_keyword(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        """``super().__init__(..., tokenizer=tok)`` -> ``processing_class=tok`` (a ``...Trainer(...)``
        call gets it from the legacy-names rule)."""
        return self.rename_keyword(original, updated, "tokenizer", "processing_class", (RULE, UNMIGRATED),
                                   "renamed in 4.46; the Trainer saves and pads with it as before",
                                   both="super().__init__(tokenizer=..., processing_class=...): both given")

    def _constructor(self, original: cst.Call, updated: cst.Call, owner: str) -> cst.BaseExpression:
        positional = [a for a in updated.args if a.keyword is None and not a.star]
        if len(positional) <= _INIT_POSITIONAL or self.blocked(original):
            return updated
        legacy = [p.name for p in by_method(owner)["__init__"].parameters("legacy")]
        if len(positional) > len(legacy) or any(a.star for a in updated.args):
            return updated
        args: list[cst.Arg] = []
        for name, arg in zip(legacy, positional):
            if isinstance(arg.value, cst.Name) and arg.value.value == "None":
                continue  # the default
            keyword = _arg(arg.value, _TODAY_KEYWORD.get(name, name))
            args.append(arg.with_changes(keyword=keyword.keyword, equal=keyword.equal))
        args += [a for a in updated.args if a.keyword is not None]
        if args:
            last = updated.args[-1]
            args[-1] = args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
        new = updated.with_changes(args=args)
        self.record(original, new, RULE, f"4.x's Trainer(...) took compute_metrics {_INIT_POSITIONAL + 1}th; "
                    "today's takes compute_loss_func there: by keyword, the meaning stays")
        return new

    # ------------------------------------------------------------------ what needs a person
    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.in_target += 1

    def leave_AssignTarget(self, original_node: cst.AssignTarget, updated_node: cst.AssignTarget) -> cst.AssignTarget:
        self.in_target -= 1
        return updated_node

    def _once(self, node: cst.CSTNode) -> bool:
        line = self.line(node)
        if line in self.reported:
            return False
        self.reported.add(line)
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "ShardedDDPOption" and self._once(node):
            self.flag(node, UNMIGRATED, "ShardedDDPOption: Transformers 5.x has no --sharded_ddp, so no "
                      "ShardedDDPOption and no self.sharded_ddp",
                      hint="keep the branch for the sharding you train with (shardcompat run serves it), "
                           "or drop it")

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        receiver = dotted(original_node.value)
        cls = self._class()
        in_trainer = cls is not None and cls.owner is not None and receiver == "self"
        if not in_trainer and not receiver.lower().endswith("trainer"):
            return updated_node
        name = original_node.attr.value
        scope = self._method()
        if (in_trainer and name == "model" and scope is not None and scope.legacy and scope.change.method == "create_optimizer"
                and not self.in_target and not self.blocked(original_node)):
            new = cst.parse_expression("(self.model if model is None else model)")
            self.record(original_node, new, RULE, "today's release passes the model the optimizer is for "
                        "(the FSDP-wrapped one), where 4.x had set self.model to it")
            return new
        renamed = MEMBER_RENAMES.get(name)
        if in_trainer and renamed is not None and renamed[0] == "trainer" and not self.blocked(original_node):
            new = updated_node.with_changes(attr=cst.Name(renamed[1]))  # self.is_world_master() in a subclass
            self.record(original_node, new, RULE, f"today's name ({name} was 3.x's; 4.0 removed it)")
            return new
        replacement = _INTERNALS.get(name)
        if replacement is not None and not self.in_target and self._once(original_node):
            self.flag(original_node, UNMIGRATED, f"{receiver}.{name}: a Transformers 4.x Trainer internal that "
                      f"5.x lacks; shardcompat run serves it with its 4.30 meaning",
                      hint=f"today: {replacement}" if "4.30's meaning" not in replacement else
                      "decide the branch by hand (5.x uses torch.amp through Accelerate, no fairscale)")
        return updated_node

