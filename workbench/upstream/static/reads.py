"""Reads of `spec_info.<attr>` reachable from an attention backend's `init_forward_metadata`.

Walks the entry method and the same file's helpers it calls (`self.m()`, `self.<obj>.m()` with
the object's class known from `self.<obj> = Cls(...)`, `self.m = self.other` dispatch, module
functions, nested functions), tracking for each read the forward modes its `if` branches allow,
whether it is guarded (a `getattr` default, `hasattr`, an earlier plain read or a write of the
same attribute) and which spec-input classes can reach it (`isinstance`, `is_*_input()`).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field, replace

from .modes import ForwardModes, predicate_call

ENTRY = "init_forward_metadata"


def is_spec(node: ast.AST, aliases: frozenset = frozenset()) -> bool:
    """`spec_info`, `<x>.spec_info`, `*_spec_info`, or a local bound to one of those."""
    if isinstance(node, ast.Name):
        return node.id.endswith("spec_info") or node.id in aliases
    return isinstance(node, ast.Attribute) and node.attr.endswith("spec_info")


@dataclass(frozen=True)
class Ctx:
    """What holds where a statement runs."""

    modes: frozenset | None = None  # None: any forward mode
    has: frozenset = frozenset()  # attributes known to exist (guards)
    only: tuple = ()  # class constraints: ("isinstance", C, bool) | ("pred", name, bool) | ("type", X, bool)
    aliases: frozenset = frozenset()
    bound: frozenset = frozenset()  # (parameter, what the caller passed): the family's values handed to a callee


@dataclass
class Facts:
    """What a branch test implies when it is true / false."""

    true_has: set = field(default_factory=set)
    false_has: set = field(default_factory=set)
    true_only: list = field(default_factory=list)
    false_only: list = field(default_factory=list)
    true_modes: set | None = None
    false_modes: set | None = None


class FileScanner:
    """Scans one backend file."""

    def __init__(self, fname: str, source: str, modes: ForwardModes | None):
        self.fname, self.lines, self.fm = fname, source.splitlines(), modes
        self.tree = ast.parse(source, filename=fname)
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.methods: dict[str, dict[str, ast.FunctionDef]] = {}
        self.obj_types: dict[str, dict[str, set]] = {}
        self.dispatch: dict[str, dict[str, set]] = {}
        for cname, cls in self.classes.items():
            self.methods[cname] = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
            types, disp = self.obj_types.setdefault(cname, {}), self.dispatch.setdefault(cname, {})
            for node in ast.walk(cls):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    t, v = node.targets[0], node.value
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in self.classes:
                            types.setdefault(t.attr, set()).add(v.func.id)
                        elif isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
                            disp.setdefault(t.attr, set()).add(v.attr)
        self.reads: list[dict] = []
        self.writes: set[str] = set()
        self._seen: set = set()
        self._kinds: dict[int, str] = {}  # id(Attribute node) -> read kind set by its parent

    def _method(self, cname: str, name: str) -> ast.FunctionDef | None:
        seen = set()
        while cname in self.classes and cname not in seen:
            seen.add(cname)
            if name in self.methods[cname]:
                return self.methods[cname][name]
            bases = [b.id for b in self.classes[cname].bases if isinstance(b, ast.Name)]
            cname = next((b for b in bases if b in self.classes), "")
        return None

    def entries(self) -> list[str]:
        """Classes of this file that define init_forward_metadata."""
        return [c for c in self.classes if ENTRY in self.methods[c]]

    def scan(self, cname: str) -> list[dict]:
        """Reads reachable from `cname.init_forward_metadata`."""
        self.reads, self.writes, self._seen = [], set(), set()
        self._func(cname, self.methods[cname][ENTRY], Ctx(), cname)
        for r in self.reads:
            if r["attr"] in self.writes and not r["guarded"]:
                r.update(guarded=True, guard="written by the backend before use")
        return self.reads

    # -- walking --------------------------------------------------------------------------
    def _func(self, cname: str | None, func: ast.FunctionDef, ctx: Ctx, qual: str) -> None:
        key = (qual, func.name, ctx)
        if key in self._seen or len(self._seen) > 2000:
            return
        self._seen.add(key)
        self._block(func.body, ctx, cname, f"{qual}.{func.name}" if qual else func.name)

    def _block(self, body: list[ast.stmt], ctx: Ctx, cname: str | None, where: str) -> None:
        for stmt in body:
            ctx = self._stmt(stmt, ctx, cname, where)

    def _stmt(self, stmt: ast.stmt, ctx: Ctx, cname: str | None, where: str) -> Ctx:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._block(stmt.body, ctx, cname, f"{where}.{stmt.name}")
            return ctx
        if isinstance(stmt, ast.If):
            facts = self._expr(stmt.test, ctx, cname, where)
            body_ctx, else_ctx = self._branch(ctx, facts, True), self._branch(ctx, facts, False)
            self._block(stmt.body, body_ctx, cname, where)
            self._block(stmt.orelse, else_ctx, cname, where)
            if stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)) and not stmt.orelse:
                return else_ctx
            return ctx
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Attribute) and is_spec(t.value, ctx.aliases):
                    self.writes.add(t.attr)
            self._expr(stmt.value, ctx, cname, where)
            names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            if names and is_spec(stmt.value, ctx.aliases):
                return replace(ctx, aliases=ctx.aliases | names)
            return ctx
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                continue
            if isinstance(child, ast.expr):
                self._expr(child, ctx, cname, where)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(stmt, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                self._block(block, ctx, cname, where)
        for handler in getattr(stmt, "handlers", []):
            self._block(handler.body, ctx, cname, where)
        return ctx

    def _branch(self, ctx: Ctx, facts: Facts, truth: bool) -> Ctx:
        has = facts.true_has if truth else facts.false_has
        only = facts.true_only if truth else facts.false_only
        modes = facts.true_modes if truth else facts.false_modes
        if modes is not None:
            modes = frozenset(modes) if ctx.modes is None else ctx.modes & frozenset(modes)
        else:
            modes = ctx.modes
        return replace(ctx, modes=modes, has=ctx.has | frozenset(has), only=ctx.only + tuple(only))

    def _expr(self, node: ast.expr, ctx: Ctx, cname: str | None, where: str) -> Facts:  # noqa: C901
        """Record reads in `node` under `ctx`; return the facts `node` implies as a test."""
        facts = Facts()
        if isinstance(node, ast.BoolOp):
            is_and = isinstance(node.op, ast.And)
            cur, parts = ctx, []
            for value in node.values:
                part = self._expr(value, cur, cname, where)
                parts.append(part)
                cur = self._branch(cur, part, is_and)
            first = parts[0]
            if is_and:
                facts.true_has = set().union(*(p.true_has for p in parts))
                facts.true_only = [o for p in parts for o in p.true_only]
                facts.false_has = set(first.false_has & first.true_has)
                ms = [p.true_modes for p in parts if p.true_modes is not None]
                facts.true_modes = set.intersection(*ms) if ms else None
            else:
                facts.false_has = set().union(*(p.false_has for p in parts))
                facts.false_only = [o for p in parts for o in p.false_only]
                facts.true_has = set(first.true_has & first.false_has)
                ms = [p.false_modes for p in parts if p.false_modes is not None]
                facts.false_modes = set.intersection(*ms) if ms else None
            return facts
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self._expr(node.operand, ctx, cname, where)
            return Facts(
                inner.false_has, inner.true_has, inner.false_only, inner.true_only, inner.false_modes, inner.true_modes
            )
        pred = predicate_call(node)
        if pred is not None and self.fm is not None:
            accepted = self.fm.accepts(*pred)
            if accepted is not None:
                facts.true_modes, facts.false_modes = accepted, set(self.fm.members) - accepted
        if isinstance(node, ast.Call):
            self._call(node, ctx, cname, where, facts)
        typed = _type_test(node, ctx)
        if typed is not None:
            names, truth = typed
            facts.true_only.append(("type", names, truth))
            facts.false_only.append(("type", names, not truth))
        if (
            isinstance(node, ast.Compare)
            and all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
            and all(isinstance(c, ast.Constant) and c.value is None for c in node.comparators)
        ):
            self._kinds[id(node.left)] = "none_check"
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Call):
            inner = self._getattr_default(node.left, ctx)
            if inner and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None:
                (facts.false_has if isinstance(node.ops[0], ast.Is) else facts.true_has).add(inner)
        if isinstance(node, ast.Attribute) and is_spec(node.value, ctx.aliases) and isinstance(node.ctx, ast.Load):
            self._read(node, ctx, where, kind=self._kinds.get(id(node), "plain"))
            facts.true_has.add(node.attr)
            facts.false_has.add(node.attr)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr) and not (
                isinstance(node, ast.Call) and child is node.func and isinstance(child, ast.Name)
            ):
                sub = self._expr(child, ctx, cname, where)
                if not isinstance(node, (ast.Lambda,)):
                    facts.true_has |= sub.true_has & sub.false_has
                    facts.false_has |= sub.true_has & sub.false_has
        return facts

    def _getattr_default(self, node: ast.Call, ctx: Ctx) -> str | None:
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 3
            and is_spec(node.args[0], ctx.aliases)
            and isinstance(node.args[1], ast.Constant)
        ):
            return node.args[1].value
        return None

    def _call(self, node: ast.Call, ctx: Ctx, cname: str | None, where: str, facts: Facts) -> None:
        func, args = node.func, node.args
        if (
            isinstance(func, ast.Name)
            and func.id in ("hasattr", "getattr", "isinstance")
            and args
            and is_spec(args[0], ctx.aliases)
        ):
            if func.id == "hasattr" and isinstance(args[1], ast.Constant):
                facts.true_has.add(args[1].value)
                self._read(node, ctx, where, attr=args[1].value, kind="hasattr")
            elif func.id == "getattr" and isinstance(args[1], ast.Constant):
                default = len(args) >= 3
                self._read(node, ctx, where, attr=args[1].value, kind="getattr" if default else "plain")
            elif func.id == "isinstance":
                names = [e for e in (args[1].elts if isinstance(args[1], ast.Tuple) else [args[1]])]
                classes = tuple(n.id if isinstance(n, ast.Name) else getattr(n, "attr", "?") for n in names)
                facts.true_only.append(("isinstance", classes, True))
                facts.false_only.append(("isinstance", classes, False))
            return
        if (
            isinstance(func, ast.Attribute)
            and is_spec(func.value, ctx.aliases)
            and func.attr.startswith("is_")
            and func.attr.endswith("_input")
        ):
            facts.true_only.append(("pred", func.attr, True))
            facts.false_only.append(("pred", func.attr, False))
        for target, owner in self._callees(func, cname):
            self._enter(node, target, owner, ctx, where)

    def _enter(self, call: ast.Call, target: ast.FunctionDef, owner: str | None, ctx: Ctx, where: str) -> None:
        """Walk a callee of `call` (made in `where`) under the caller's context."""
        self._func(owner, target, ctx, owner or "")

    def _callees(self, func: ast.expr, cname: str | None) -> list[tuple[ast.FunctionDef, str | None]]:
        out = []
        if isinstance(func, ast.Name) and func.id in self.functions:
            out.append((self.functions[func.id], None))
        elif isinstance(func, ast.Attribute) and cname:
            recv = func.value
            if isinstance(recv, ast.Name) and recv.id == "self":
                names = self.dispatch.get(cname, {}).get(func.attr, set()) | {func.attr}
                out += [(m, cname) for n in sorted(names) if (m := self._method(cname, n))]
            elif isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name) and recv.value.id == "self":
                for other in sorted(self.obj_types.get(cname, {}).get(recv.attr, set())):
                    names = self.dispatch.get(other, {}).get(func.attr, set()) | {func.attr}
                    out += [(m, other) for n in sorted(names) if (m := self._method(other, n))]
        return [(f, o) for f, o in out if not _only_raises(f)]

    def _read(self, node: ast.AST, ctx: Ctx, where: str, attr: str | None = None, kind: str = "plain") -> None:
        """Record a read; kind: plain, none_check (`x.a is None`), getattr (with a default), hasattr."""
        attr = attr or node.attr  # type: ignore[attr-defined]
        guard = {"getattr": "getattr default", "hasattr": "hasattr"}.get(kind)
        guard = guard or ("guarded" if attr in ctx.has else None)
        self.reads.append(
            {
                "file": self.fname,
                "line": node.lineno,
                "attr": attr,
                "kind": kind,
                "function": where,
                "code": self.lines[node.lineno - 1].strip(),
                "guarded": guard is not None,
                "guard": guard,
                "modes": None if ctx.modes is None else sorted(ctx.modes),
                "only": [list(o) for o in ctx.only],
            }
        )


def _type_test(node: ast.expr, ctx: Ctx) -> tuple[tuple[str, ...], bool] | None:
    """(SpecInputType members, truth) of `<spec>.spec_input_type == / != / in / not in SpecInputType.X`."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return None
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if not (isinstance(left, ast.Attribute) and left.attr == "spec_input_type" and is_spec(left.value, ctx.aliases)):
        return None
    elts = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
    names = tuple(
        e.attr for e in elts if isinstance(e, ast.Attribute) and getattr(e.value, "id", None) == "SpecInputType"
    )
    if len(names) != len(elts) or not names:
        return None
    if isinstance(op, (ast.Eq, ast.Is, ast.In)):
        return names, True
    if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
        return names, False
    return None


def _only_raises(func: ast.FunctionDef) -> bool:
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


_CACHE: dict[tuple, dict[str, list[dict]]] = {}


def backend_reads(fname: str, source: str, modes: ForwardModes | None) -> dict[str, list[dict]]:
    """{backend class: reads} for every class in `source` that defines init_forward_metadata.

    Cached by file and content (and the ForwardMode members), so mutants re-read only the
    backends they change; callers must not modify the returned reads.
    """
    key = (fname, hashlib.sha1(source.encode("utf-8", "replace")).hexdigest(), tuple(modes.members) if modes else ())
    if key not in _CACHE:
        scanner = FileScanner(fname, source, modes)
        _CACHE[key] = {cname: _dedup(scanner.scan(cname)) for cname in scanner.entries()}
        if len(_CACHE) > 2000:
            _CACHE.pop(next(iter(_CACHE)))
    return _CACHE[key]


def _dedup(reads: list[dict]) -> list[dict]:
    out: dict[tuple, dict] = {}
    for r in reads:
        key = (r["line"], r["attr"], r["kind"], r["guarded"], tuple(map(tuple, r["only"])))
        if key in out and out[key]["modes"] is not None:
            merged = None if r["modes"] is None else sorted(set(out[key]["modes"]) | set(r["modes"]))
            out[key]["modes"] = merged
        else:
            out.setdefault(key, r)
    return sorted(out.values(), key=lambda r: (r["line"], r["attr"]))
