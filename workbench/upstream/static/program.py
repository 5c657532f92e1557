"""The functions and classes of a set of source files, and how a call resolves to them.

`Index` holds every function and method of the files (parsed once per content: mutants reparse
only what they change), their classes' bases, and the types attributes and names hold, read from
the sources: `self.a = Cls(...)`, `self.a: Cls`, `self.a = param` with `param: Cls`, `x = Cls(...)`,
`x: Cls = ...`, and the CamelCase of an attribute that names a class (`eager_runner` -> `EagerRunner`).
A call resolves through those types (`super().m()` along the class's bases), else by name (at most
a few candidates): an over-approximation.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field

_PARSED: dict[tuple[str, str], ast.Module | None] = {}
_INDEXED: dict[tuple[str, str], tuple[list, dict, dict]] = {}  # (path, sha1) -> (Funcs, bases, fields)
_ERRORS: dict[tuple[str, str], str] = {}  # (path, sha1) -> why it does not parse


def _key(path: str, text: str) -> tuple[str, str]:
    return path, hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()


_MAX_CANDIDATES = 6


def parse(path: str, text: str) -> ast.Module | None:
    """`ast.parse` of a file, cached by path and content (mutants reparse only what they change);
    None when it does not parse (`parse_error` says why; the lint reports such a file, never skips it)."""
    key = _key(path, text)
    if key not in _PARSED:
        try:
            _PARSED[key] = ast.parse(text, filename=path)
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the source
            _PARSED[key] = None
            _ERRORS[key] = f"{type(exc).__name__}: {exc}"
        if len(_PARSED) > 4000:
            _ERRORS.pop(next(iter(_PARSED)), None)
            _PARSED.pop(next(iter(_PARSED)))
    return _PARSED[key]


def parse_error(path: str, text: str) -> str | None:
    """Why `text` does not parse as Python (the SyntaxError and its line), or None when it does."""
    return None if parse(path, text) is not None else _ERRORS.get(_key(path, text), "does not parse")


@dataclass
class Func:
    """A function or method of the program."""

    file: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: str | None  # the class it is defined in
    is_classmethod: bool = False
    locals: dict[str, list[ast.expr]] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)  # local `x: Cls = ...` -> Cls
    nodes: list[ast.AST] = field(default_factory=list)  # its own nodes (see `_own_nodes`)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name

    @property
    def params(self) -> list[str]:
        a = self.node.args
        names = [x.arg for x in [*a.posonlyargs, *a.args]]
        if self.owner and names and names[0] in ("self", "cls"):
            names = names[1:]
        return names + [x.arg for x in a.kwonlyargs]


def _own_nodes(func: ast.AST):
    """The nodes of `func`'s body, not descending into nested functions, classes or lambdas."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _callee_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else None)


def _named(ann: ast.expr | None) -> str | None:
    """The class an annotation names: `Cls`, `mod.Cls`, `"Cls"`, `Optional[Cls]`."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return ann.value.split("[")[0].split(".")[-1].strip("'\" ")
    if isinstance(ann, ast.Subscript):  # Optional[Cls]
        return _named(ann.slice)
    return getattr(ann, "id", getattr(ann, "attr", None))


def _index(path: str, tree: ast.Module) -> tuple[list[Func], dict[str, list[str]], dict[str, list[str]]]:
    """The functions (top-level and methods) of one module, its classes' bases, and their annotated
    class-body fields in order (a dataclass's positional parameters)."""
    funcs: list[Func] = []
    bases: dict[str, list[str]] = {}
    fields: dict[str, list[str]] = {}

    def add(node, owner: str | None) -> None:
        decos = {getattr(d, "id", getattr(d, "attr", "")) for d in node.decorator_list}
        fn = Func(path, node, owner, "classmethod" in decos, nodes=list(_own_nodes(node)))
        for sub in fn.nodes:
            targets = []
            if isinstance(sub, ast.Assign):
                targets = [(t, sub.value) for t in sub.targets]
            elif isinstance(sub, (ast.AnnAssign, ast.NamedExpr)) and sub.value is not None:
                targets = [(sub.target, sub.value)]
            if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name) and (c := _named(sub.annotation)):
                fn.annotations.setdefault(sub.target.id, c)
            for t, v in targets:
                names = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
                for x in names:  # `a, b = f()`: each name may hold any element (an over-approximation)
                    if isinstance(x, ast.Name):
                        fn.locals.setdefault(x.id, []).append(v)
        funcs.append(fn)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node, None)
        elif isinstance(node, ast.ClassDef):
            bases.setdefault(node.name, [getattr(b, "id", getattr(b, "attr", "")) for b in node.bases])
            fields.setdefault(
                node.name,
                [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)],
            )
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(sub, node.name)
    return funcs, bases, fields


class Index:
    """Functions and classes of a set of source files (see the module docstring)."""

    def __init__(self, files: dict[str, str], spec_classes: dict[str, dict]):
        self.spec = spec_classes
        self.funcs: list[Func] = []
        self.by_name: dict[str, list[Func]] = {}
        self.methods: dict[str, dict[str, Func]] = {}
        self.bases: dict[str, list[str]] = {}
        self.fields: dict[str, list[str]] = {}
        for path, text in sorted(files.items()):
            tree, key = parse(path, text), _key(path, text)
            if tree is None:
                continue
            if key not in _INDEXED:
                _INDEXED[key] = _index(path, tree)
                if len(_INDEXED) > 4000:
                    _INDEXED.pop(next(iter(_INDEXED)))
            funcs, bases, fields = _INDEXED[key]
            for fn in funcs:
                self.funcs.append(fn)
                self.by_name.setdefault(fn.name, []).append(fn)
                if fn.owner:
                    self.methods.setdefault(fn.owner, {}).setdefault(fn.name, fn)
            for cls, b in bases.items():
                self.bases.setdefault(cls, b)
                self.fields.setdefault(cls, fields.get(cls, []))
        self._returns: dict[tuple[int, str | None], frozenset] = {}
        self._busy: set[tuple[int, str | None]] = set()
        self._busy_fields: set[tuple] = set()
        self.attr_types = self._attr_types()

    def _name_type(self, name: str, where: Func) -> set[str]:
        """Classes a local name holds: its parameter annotation, the class it is built from
        (`x = Cls(...)`), or its CamelCase (`model_runner` -> `ModelRunner`)."""
        a = where.node.args
        for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
            if x.arg == name and x.annotation is not None:
                ann = x.annotation
                if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                    cls = ann.value.split("[")[0].split(".")[-1]
                else:
                    cls = getattr(ann, "id", getattr(ann, "attr", None))
                if cls in self.methods:
                    return {cls}
        if where.annotations.get(name) in self.methods:  # `x: Cls = batch.spec_info`
            return {where.annotations[name]}
        built = {_callee_name(v) for v in where.locals.get(name, []) if isinstance(v, ast.Call)}
        built = {c for c in built if c in self.methods}
        if built:
            return built
        camel = "".join(w.capitalize() for w in name.strip("_").split("_"))
        return {camel} if camel in self.methods else set()

    def _attr_types(self) -> dict[str, set[str]]:
        """{attribute name: classes of the program it holds}, from `x.a = Cls(...)`, `x.a: Cls` and
        `self.a = param` with the parameter annotated `Cls` (string annotations included)."""

        out: dict[str, set[str]] = {}
        for fn in self.funcs:
            a = fn.node.args
            anns = {x.arg: _named(x.annotation) for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
            for node in fn.nodes:
                if isinstance(node, ast.Assign):
                    pairs = [(t, node.value, None) for t in node.targets]
                elif isinstance(node, ast.AnnAssign):
                    pairs = [(node.target, node.value, _named(node.annotation))]
                else:
                    continue
                for t, v, ann in pairs:
                    if not isinstance(t, ast.Attribute):
                        continue
                    cls = ann
                    if isinstance(v, ast.Call):
                        cls = cls or _callee_name(v)
                    elif isinstance(v, ast.Name):
                        cls = cls or anns.get(v.id)
                    if cls and cls in self.methods:
                        out.setdefault(t.attr, set()).add(cls)
        for attr in {t.attr for fn in self.funcs for t in fn.nodes if isinstance(t, ast.Attribute)} - set(out):
            camel = "".join(w.capitalize() for w in attr.strip("_").split("_"))  # eager_runner -> EagerRunner
            if camel in self.methods:
                out[attr] = {camel}
        return out

    def dataclass_fields(self, cls: str, seen: frozenset = frozenset()) -> list[str]:
        """`cls`'s annotated fields in dataclass order (the bases' first)."""
        out: list[str] = []
        for b in reversed(self.bases.get(cls, [])):
            if b in self.bases and b not in seen:
                out += [f for f in self.dataclass_fields(b, seen | {cls}) if f not in out]
        return out + [f for f in self.fields.get(cls, []) if f not in out]

    def method(self, cls: str, name: str) -> Func | None:
        """`cls.name` looked up along the bases (by name, first definition wins)."""
        seen, todo = set(), [cls]
        while todo:
            c = todo.pop(0)
            if c in seen:
                continue
            seen.add(c)
            if name in self.methods.get(c, {}):
                return self.methods[c][name]
            todo += self.bases.get(c, [])
        return None

    def callees(self, call: ast.Call, where: Func) -> list[tuple[Func, str | None]]:
        """Functions a call may run, each with the class `cls` is bound to (classmethods)."""
        f = call.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and _callee_name(f.value) == "super":
            # `super().m(...)` in a method of C: `m` along C's bases
            found = [m for b in self.bases.get(where.owner or "", []) if (m := self.method(b, f.attr))]
            return [(found[0], where.owner if where.is_classmethod else None)] if found else []
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            recv = f.value.id
            if recv in ("self", "cls") and where.owner:
                m = self.method(where.owner, f.attr)
                if m is not None:
                    return [(m, where.owner if recv == "cls" else None)]
            elif recv in self.methods or recv in self.spec:
                m = self.method(recv, f.attr)
                return [(m, recv)] if m is not None else []
        if isinstance(f, ast.Attribute) and isinstance(f.value, (ast.Attribute, ast.Name)):
            recv = f.value
            if isinstance(recv, ast.Attribute):
                classes = self.attr_types.get(recv.attr, set())
            else:
                classes = self._name_type(recv.id, where)
            typed = [(m, None) for c in sorted(classes) if (m := self.method(c, f.attr))]
            if typed:
                return typed
        name = _callee_name(call)
        cands = self.by_name.get(name or "", [])
        if isinstance(f, ast.Name):
            cands = [c for c in cands if c.owner is None] or cands
        return [(c, None) for c in cands[:_MAX_CANDIDATES]] if len(cands) <= _MAX_CANDIDATES else []
