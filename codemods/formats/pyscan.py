"""A cheap first look at a Python file with the standard ``ast`` parser (C, no libcst).

It finds the *units* the libcst rules need to see: the smallest statements, or the header
expressions of compound statements, that hold something a rule can act on (a ``sharded_ddp``
keyword, assignment or comparison, a string with the flag, a fairscale import or use).  The
fast path parses only those units with libcst and splices their new text back by offset, so a
file costs one ``ast.parse`` plus libcst on a few lines; a file whose mentions are all comments,
docstrings or log/help text never loads libcst at all.

It also gathers the file-level *facts* the rules need beyond one statement: whether the file
declares ``--sharded_ddp`` as a string option (so passing ``args.sharded_ddp`` on is already
migrated), and which fairscale modules are bound to which local names and how they are used.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "FACADE",
    "AliasPlan",
    "Facts",
    "Lines",
    "Unit",
    "facade_resolve",
    "facts_of",
    "from_import_moves",
    "import_moves",
    "is_fairscale",
    "quiet_call",
    "scan",
]

KEY = "sharded_ddp"
FACADE = "shardcompat.fairscale"
#: Call names and keywords whose string arguments are messages, never command lines; shared
#: with the libcst rules (:mod:`codemods.rules.sharded_ddp.python`), which apply the same exemption.
QUIET_CALLS = frozenset({"print", "debug", "info", "warning", "warn", "error", "exception",
                         "critical", "log", "echo", "secho", "write", "fail", "skip"})
QUIET_KEYWORDS = frozenset({"help", "description", "epilog", "usage", "msg", "message", "doc"})
_BOOL_TYPES = re.compile(r"bool|strtobool")


def quiet_call(name: str) -> bool:
    """A call whose string arguments are messages: ``print``, ``logger.info``, ``ValueError``."""
    return name in QUIET_CALLS or name.endswith(("Error", "Exception", "Warning"))


def facade_resolve(dotted: str, *, module: bool = False) -> tuple[str, str]:
    """What ``shardcompat.fairscale`` makes of a dotted fairscale path: ``(kind, reason)`` with
    kind ``served``, ``module``, ``unserved`` (reason: the facade's refusal) or ``unknown``.

    The facade's own table answers (:func:`shardcompat.fairscale._tree.resolve`), imported on
    first use: it loads neither torch nor fairscale, and a name the facade starts serving is
    migrated without a change here.
    """
    from shardcompat.fairscale._tree import resolve

    verdict = resolve(dotted, module=module)
    return verdict.kind, verdict.reason


class Lines:
    """``(line, UTF-8 column)`` as ``ast`` reports them, to offsets in the decoded text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer(r"\r\n?|\n", text)]

    def offset(self, line: int, column: int) -> int:
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        row = self.text[start:end]
        if row.isascii():
            return start + column
        return start + len(row.encode("utf-8")[:column].decode("utf-8", "replace"))

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Unit:
    """A span of the file the libcst rules look at: a simple statement (``stmt``) or a header
    expression of a compound statement (``expr``); ``line`` is its first line."""

    start: int
    end: int
    kind: str
    line: int


@dataclass(frozen=True)
class AliasPlan:
    """A name bound to a fairscale *module* (``import fairscale.optim as optim``, ``import
    fairscale``) and what becomes of it: ``rewrite`` (every use is a name the facade serves at
    that path) or not, with the uses that stop it (line, dotted text)."""

    local: str
    module: str
    rewrite: bool
    #: the line of the import that binds it
    line: int = 0
    #: bound by ``from fairscale.x import module``
    via_from: bool = False
    #: dotted uses to rewrite, for a binding without an alias: ``fairscale.optim.OSS`` ->
    #: ``shardcompat.fairscale.optim.OSS``
    chains: dict[str, str] = field(default_factory=dict)
    blockers: tuple[tuple[int, str], ...] = ()


@dataclass
class Facts:
    """What the rules need to know about the whole file."""

    #: ``--sharded_ddp`` is declared in this file as a string option (or as a boolean that this
    #: run migrates), so passing ``args.sharded_ddp`` on is already in the list syntax.
    declares_flag: bool = False
    #: an argparse parser here declares positional arguments (which a bare ``--sharded_ddp``
    #: with ``nargs="?"`` would take as its value)
    positionals: bool = False
    #: fairscale module bindings by local name
    aliases: dict[str, AliasPlan] = field(default_factory=dict)
    #: checks that fairscale is installed (``is_fairscale_available()``, ``dep_version_check("fairscale")``),
    #: by line, in a file with fairscale imports the facade takes
    guards: tuple[tuple[int, str], ...] = ()
    scanned_fairscale: bool = False


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def is_fairscale(module: str | None) -> bool:
    """``fairscale`` or a module under it."""
    return module is not None and (module == "fairscale" or module.startswith("fairscale."))


def _declares(node: ast.AST) -> bool:
    """A declaration of the flag that is a string option (or a boolean this run migrates)."""
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == KEY
    if not isinstance(node, ast.Call):
        return False
    name = _name(node.func)
    if name == "add_sharded_ddp_argument":
        return True
    if name != "add_argument" or not any(
        isinstance(a, ast.Constant) and a.value == "--" + KEY for a in node.args
    ):
        return False
    kind = next((k.value for k in node.keywords if k.arg == "type"), None)
    return kind is None or not _BOOL_TYPES.search(ast.unparse(kind))


def _fairscale_bindings(tree: ast.Module) -> dict[str, AliasPlan]:
    """Names bound to fairscale modules, and whether every use of each is a name the facade
    serves at that path (so that swapping the prefix keeps the code working)."""
    bound: dict[str, str] = {}  # local name -> fairscale module
    where: dict[str, int] = {}
    via_from: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_fairscale(alias.name):
                    local = alias.asname or alias.name.split(".", 1)[0]
                    bound[local] = alias.name if alias.asname else "fairscale"
                    where.setdefault(local, node.lineno)
        elif isinstance(node, ast.ImportFrom) and not node.level and is_fairscale(node.module):
            for alias in node.names:
                # a submodule bound by name (``from fairscale.nn import data_parallel``)
                if alias.name != "*" and facade_resolve(f"{node.module}.{alias.name}")[0] == "module":
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    where.setdefault(alias.asname or alias.name, node.lineno)
                    via_from.add(alias.asname or alias.name)
    if not bound:
        return {}
    uses: dict[str, list[tuple[int, str]]] = {name: [] for name in bound}
    attributes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in attributes:
            dotted = _dotted(node)
            root = dotted.split(".", 1)[0] if dotted else ""
            if root in uses:
                assert dotted is not None
                uses[root].append((node.lineno, dotted))
                inner: ast.AST = node.value
                while isinstance(inner, ast.Attribute):
                    attributes.add(id(inner))
                    inner = inner.value
                attributes.add(id(inner))
    for node in ast.walk(tree):  # the name on its own: passed around, not looked into
        if isinstance(node, ast.Name) and node.id in uses and id(node) not in attributes \
                and isinstance(node.ctx, ast.Load):
            uses[node.id].append((node.lineno, node.id))
    plans = {}
    for local, module in bound.items():
        chains: dict[str, str] = {}
        blockers = []
        for line, dotted in uses[local]:
            parts = dotted.split(".")[1:]
            served = next((i for i in range(len(parts))
                           if facade_resolve(".".join([module, *parts[:i + 1]]))[0] == "served"), None)
            if served is None:
                blockers.append((line, dotted))
            elif module == "fairscale":  # no alias: the whole dotted path is written at each use
                prefix = ".".join(["fairscale", *parts[:served + 1]])
                chains[prefix] = f"shardcompat.{prefix}"
        used = bool(uses[local])
        plans[local] = AliasPlan(local, module, used and not blockers, where[local], local in via_from, chains,
                                 tuple(blockers))
    return plans


def import_moves(module: str, local: str, aliases: dict[str, AliasPlan]) -> bool:
    """Whether ``import {module} [as local]`` moves to the facade: a fairscale module the facade
    mirrors, bound to a name whose every use it serves."""
    plan = aliases.get(local)
    return (is_fairscale(module) and plan is not None and plan.rewrite
            and facade_resolve(module, module=True)[0] == "module")


def from_import_moves(module: str, name: str, local: str, aliases: dict[str, AliasPlan]) -> bool:
    """Whether ``name`` of ``from {module} import {name} [as local]`` moves to the facade: a
    served name, or a submodule bound to a name whose every use the facade serves."""
    kind = facade_resolve(f"{module}.{name}")[0]
    plan = aliases.get(local)
    return kind == "served" or (kind == "module" and plan is not None and plan.rewrite)


def _moves_fairscale(node: ast.stmt, aliases: dict[str, AliasPlan]) -> bool:
    """Whether the facade takes (part of) this import statement, as the rule will move it."""
    if isinstance(node, ast.ImportFrom) and not node.level and is_fairscale(node.module):
        module = node.module or ""
        return any(from_import_moves(module, a.name, a.asname or a.name, aliases) for a in node.names)
    if isinstance(node, ast.Import):
        return any(import_moves(a.name, a.asname or a.name.split(".", 1)[0], aliases) for a in node.names)
    return False


def _fairscale_guards(tree: ast.Module, plans: dict[str, AliasPlan]) -> tuple[tuple[int, str], ...]:
    """The installed-fairscale checks of a file whose fairscale imports move to the facade: the
    Transformers 4.x Trainer's ``if is_fairscale_available():`` (and its ``dep_version_check``)
    would skip the facade imports wherever fairscale is not installed."""
    if not any(_moves_fairscale(node, plans) for node in ast.walk(tree) if isinstance(node, ast.stmt)):
        return ()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if name == "is_fairscale_available" or (
                name == "dep_version_check" and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "fairscale"):
            found.append((node.lineno, ast.unparse(node)))
    return tuple(sorted(found))


_POSITIONAL = re.compile(r"add_argument\(\s*[\"'][^-\"']")


def facts_of(tree: ast.Module, text: str, *, legacy: bool = True, fairscale: bool = False,
             nodes: Iterable[ast.AST] | None = None) -> Facts:
    """The file-level facts (see :class:`Facts`); ``nodes`` limits the search for declarations
    to the statements that mention the flag (every declaration does)."""
    facts = Facts()
    if legacy:
        facts.declares_flag = any(_declares(n) for root in (tree.body if nodes is None else nodes)
                                  for n in ast.walk(root))
        facts.positionals = _POSITIONAL.search(text) is not None
    if fairscale:
        facts.scanned_fairscale = True
        if "fairscale" in text:
            facts.aliases = _fairscale_bindings(tree)
            facts.guards = _fairscale_guards(tree, facts.aliases)
    return facts


# --------------------------------------------------------------------------- units

_BODIES = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})
_SKIPPED_HEADERS = frozenset({"args", "type_params", "name", "type_comment"})


def _headers(node: ast.stmt) -> Iterator[ast.expr]:
    """The expressions written in a compound statement's header lines (parameters excepted:
    defaults are never edited)."""
    for name, value in ast.iter_fields(node):
        if name in _BODIES or name in _SKIPPED_HEADERS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.expr):
                yield item
            elif isinstance(item, ast.withitem):
                yield item.context_expr
            elif isinstance(item, ast.keyword):
                yield item.value


def _blocks(node: ast.stmt) -> Iterator[tuple[list[ast.expr], list[ast.stmt]]]:
    """The nested statement lists, each with the expressions of its own header (``except
    E:``, ``case P if g:``)."""
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if value:
            yield [], value
    for handler in getattr(node, "handlers", ()):
        yield ([handler.type] if handler.type is not None else []), handler.body
    for case in getattr(node, "cases", ()):
        yield ([case.guard] if case.guard is not None else []), case.body


_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
             ast.While, ast.With, ast.AsyncWith, ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),
             *((ast.Match,) if hasattr(ast, "Match") else ()))


class _Finder:
    """Collects the units whose lines hold a needle and whose nodes a rule can act on."""

    def __init__(self, lines: Lines, needle_lines: list[int], facts: Facts, legacy: bool,
                 fairscale: bool) -> None:
        self.lines, self.needles = lines, needle_lines
        self.facts, self.legacy, self.fairscale = facts, legacy, fairscale
        self.units: list[Unit] = []
        self.nodes: list[ast.AST] = []

    def _has_needle(self, first: int, last: int) -> bool:
        index = bisect.bisect_left(self.needles, first)
        return index < len(self.needles) and self.needles[index] <= last

    def block(self, statements: Iterable[ast.stmt]) -> None:
        for node in statements:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            if not self._has_needle(first, node.end_lineno or node.lineno):
                continue
            if isinstance(node, _COMPOUND):
                self.expressions(_headers(node))
                for headers, body in _blocks(node):
                    self.expressions(headers)
                    self.block(body)
            elif self.relevant(node):
                self.add(node, "stmt")

    def expressions(self, nodes: Iterable[ast.expr]) -> None:
        for node in nodes:
            if self._has_needle(node.lineno, node.end_lineno or node.lineno) and self.relevant(node):
                self.add(node, "expr")

    def add(self, node: ast.AST, kind: str) -> None:
        self.nodes.append(node)
        start, end = self.lines.span(node)
        self.units.append(Unit(start, end, kind, node.lineno))  # type: ignore[attr-defined]

    def relevant(self, node: ast.AST) -> bool:
        """True when some rule may act on ``node``: a cheap, generous test (a unit that turns
        out to need nothing costs a small libcst parse; a missed one would be a bug).  Strings
        in the places the command-line rule never edits (docstrings, messages, ``help=``) do
        not count."""
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            return False  # a docstring or a bare string statement
        quiet: set[int] = set()
        for child in ast.walk(node):  # breadth first: a parent is seen before its children
            if id(child) in quiet:
                quiet.update(id(c) for c in ast.iter_child_nodes(child))
            elif isinstance(child, ast.Call) and quiet_call(_name(child.func)):
                quiet.update(id(c) for c in ast.iter_child_nodes(child) if c is not child.func)
            elif isinstance(child, ast.keyword) and child.arg in QUIET_KEYWORDS:
                quiet.add(id(child.value))
            if (self.legacy and self._legacy(child, id(child) in quiet)) or (
                    self.fairscale and self._fairscale(child)):
                return True
        return False

    def _legacy(self, node: ast.AST, quiet: bool) -> bool:
        if isinstance(node, ast.keyword):
            return node.arg == KEY
        if isinstance(node, ast.Constant):
            if quiet:
                return False
            value = node.value
            return (isinstance(value, str) and KEY in value) or (isinstance(value, bytes) and b"sharded_ddp" in value)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return any(_name(t) == KEY for t in targets)
        if isinstance(node, ast.Compare):
            return any(_name(s) == KEY for s in (node.left, *node.comparators))
        return isinstance(node, ast.Call) and _name(node.func) == "add_sharded_ddp_argument"

    def _fairscale(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Import):
            return any(is_fairscale(a.name) for a in node.names)
        if isinstance(node, ast.ImportFrom):
            return not node.level and is_fairscale(node.module)
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            plan = self.facts.aliases.get(dotted.split(".", 1)[0]) if dotted else None
            return plan is not None and plan.rewrite and bool(plan.chains)
        return False


def scan(text: str, tree: ast.Module, *, legacy: bool = True,
         fairscale: bool = False) -> tuple[list[Unit], Facts, Lines]:
    """The units of one file, in order, with its facts and its line table."""
    lines = Lines(text)
    facts = facts_of(tree, text, legacy=False, fairscale=fairscale)
    words = ([KEY] if legacy else []) + (["fairscale"] if fairscale else [])
    needle_lines = sorted({lines.line(m.start()) for word in words
                           for m in re.finditer(re.escape(word), text)})
    finder = _Finder(lines, needle_lines, facts, legacy, fairscale)
    if needle_lines:
        finder.block(tree.body)
    if legacy and finder.units:
        found = facts_of(tree, text, legacy=True, nodes=finder.nodes)
        facts.declares_flag, facts.positionals = found.declares_flag, found.positionals
    return finder.units, facts, lines
