"""What a module's source defines, read with ``ast`` and compiled (runs inside the release environment).

``SourceModel(path)`` holds, for one ``.py`` file: the names its statements bind at module level
(definitions, assignments, imports, ``global`` declarations, star imports), every class it defines
(its body's names, bases, decorators, dataclass parameters and fields, attributes the module sets
on it from outside the body), literal values bound once, and the compiled code of every function
keyed by qualified name. ``shim_guard`` compares the live modules with it. No workbench import.
"""

import ast
from dataclasses import dataclass, field

NO_LITERAL = object()
_FIELD_FLAGS = ("init", "repr", "compare", "hash", "kw_only")


@dataclass
class FieldSource:
    """One annotated name of a dataclass body."""

    name: str
    kind: str  # field | classvar | initvar
    has_default: bool
    has_factory: bool
    flags: dict  # literal keyword arguments of a field(...) call: init, repr, compare, hash, kw_only
    literal: object = NO_LITERAL  # the default's value when it is a literal


@dataclass
class ClassSource:
    name: str
    qualname: str
    names: set  # bound by the class body
    defs: dict  # method name -> (undecorated, sole): _Scope.def_kinds
    bases: list | None  # base names as written (last part of a dotted name); None: not plain names
    decorated: bool
    dataclass: dict | None  # literal keyword arguments of @dataclass(...), or None when not a dataclass
    fields: list  # FieldSource, in body order (dataclasses only)
    annotated: set = field(default_factory=set)  # names annotated in the body (slot storage of a Struct)
    literals: dict = field(default_factory=dict)  # name -> literal value bound once in the body
    outside: set = field(default_factory=set)  # attributes the module sets with `Class.name = ...`


def _literal(node) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NO_LITERAL


def _immutable(value) -> bool:
    if isinstance(value, tuple):
        return all(map(_immutable, value))
    return value is None or isinstance(value, (bool, int, float, complex, str, bytes))


def _targets(node, out: set) -> None:
    if isinstance(node, ast.Name):
        out.add(node.id)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            _targets(elt, out)
    elif isinstance(node, ast.Starred):
        _targets(node.value, out)


def _last_name(node) -> str | None:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_dataclass_decorator(node) -> dict | None:
    call = node if isinstance(node, ast.Call) else None
    if _last_name(call.func if call else node) != "dataclass":
        return None
    return {k.arg: _literal(k.value) for k in (call.keywords if call else []) if k.arg}


class _Scope:
    """The names one scope's statements bind, without entering nested functions or classes."""

    def __init__(self) -> None:
        self.names: set = set()
        self.counts: dict = {}
        self.literal_nodes: dict = {}
        self.defs: dict = {}  # name -> every def binding it is undecorated
        self.def_counts: dict = {}
        self.classes: list = []  # ClassDef nodes bound in this scope
        self.unconditional: set = set()
        self.star_imports: list = []  # (module, level)
        self.attribute_sets: list = []  # (object name, attribute) of `Name.attr = ...`

    def bind(self, name: str, value=None) -> None:
        self.names.add(name)
        self.counts[name] = self.counts.get(name, 0) + 1
        if value is not None:
            self.literal_nodes[name] = value

    def walk(self, stmts: list, top: bool = True) -> None:
        compound = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
        for s in stmts:
            before = set(self.names)
            self._stmt(s)
            if top and not isinstance(s, compound) and type(s).__name__ != "TryStar":
                self.unconditional |= self.names - before

    def _stmt(self, s) -> None:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.bind(s.name)
            self.defs[s.name] = self.defs.get(s.name, True) and not s.decorator_list
            self.def_counts[s.name] = self.def_counts.get(s.name, 0) + 1
        elif isinstance(s, ast.ClassDef):
            self.bind(s.name)
            self.classes.append(s)
        elif isinstance(s, ast.Assign):
            for t in s.targets:
                found: set = set()
                _targets(t, found)
                for n in found:
                    self.bind(n, s.value if isinstance(t, ast.Name) else None)
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    self.attribute_sets.append((t.value.id, t.attr))
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None and isinstance(s.target, ast.Name):
                self.bind(s.target.id, s.value)
            elif isinstance(s.target, ast.Attribute) and isinstance(s.target.value, ast.Name) and s.value is not None:
                self.attribute_sets.append((s.target.value.id, s.target.attr))
        elif isinstance(s, ast.AugAssign):
            if isinstance(s.target, ast.Name):
                self.bind(s.target.id)
        elif isinstance(s, ast.Import):
            for a in s.names:
                self.bind(a.asname or a.name.split(".")[0])
        elif isinstance(s, ast.ImportFrom):
            for a in s.names:
                if a.name == "*":
                    self.star_imports.append((s.module, s.level))
                else:
                    self.bind(a.asname or a.name)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            found = set()
            _targets(s.target, found)
            for n in found:
                self.bind(n)
            self.walk(s.body + s.orelse, top=False)
        elif isinstance(s, (ast.While, ast.If)):
            self.walk(s.body + s.orelse, top=False)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                found = set()
                if item.optional_vars is not None:
                    _targets(item.optional_vars, found)
                for n in found:
                    self.bind(n)
            self.walk(s.body, top=False)
        elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            for h in s.handlers:
                if h.name:
                    self.bind(h.name)
                self.walk(h.body, top=False)
            self.walk(s.body + s.orelse + s.finalbody, top=False)
        elif isinstance(s, ast.Match):
            for case in s.cases:
                self.walk(case.body, top=False)
        for node in ast.walk(s) if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ():
            if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                self.bind(node.target.id)

    def def_kinds(self) -> dict:
        """def name -> (undecorated, sole): every def binding it is undecorated; nothing else binds it."""
        return {n: (p, self.counts[n] == self.def_counts[n]) for n, p in self.defs.items()}

    def literals(self) -> dict:
        """name -> value for names bound once, to an immutable literal (containers are the release's state)."""
        out = {}
        for name, node in self.literal_nodes.items():
            value = _literal(node)
            if self.counts.get(name) == 1 and _immutable(value):
                out[name] = value
        return out


def _fields(node: ast.ClassDef) -> list:
    out = []
    for s in node.body:
        if not (isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)):
            continue
        ann = ast.unparse(s.annotation)
        kind = (
            "classvar" if "ClassVar" in ann.split("[")[0] else "initvar" if "InitVar" in ann.split("[")[0] else "field"
        )
        flags, has_default, has_factory, literal = {}, s.value is not None, False, NO_LITERAL
        call = s.value if isinstance(s.value, ast.Call) and _last_name(s.value.func) == "field" else None
        if call is not None:
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            has_default, has_factory = "default" in kw, "default_factory" in kw
            flags = {k: _literal(v) for k, v in kw.items() if k in _FIELD_FLAGS and _literal(v) is not NO_LITERAL}
            if has_default:
                literal = _literal(kw["default"])
        elif s.value is not None:
            literal = _literal(s.value)
        out.append(FieldSource(s.target.id, kind, has_default, has_factory, flags, literal))
    return out


def _class(node: ast.ClassDef, prefix: str, out: dict) -> None:
    qual = f"{prefix}{node.name}"
    scope = _Scope()
    scope.walk(node.body)
    bases = [_last_name(b) for b in node.bases]
    dc = next((p for p in map(_is_dataclass_decorator, node.decorator_list) if p is not None), None)
    out[qual] = ClassSource(
        name=node.name,
        qualname=qual,
        names=scope.names,
        defs=scope.def_kinds(),
        bases=None if None in bases else bases,
        decorated=bool(node.decorator_list),
        dataclass=dc,
        fields=_fields(node) if dc is not None else [],
        annotated={n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)},
        literals=scope.literals(),
    )
    for inner in scope.classes:
        _class(inner, f"{qual}.", out)


def _attribute_sets(tree) -> set:
    """(object name, attribute) for every ``Name.attr = ...`` and ``setattr(Name, "attr", ...)`` in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    out.add((t.value.id, t.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            args = node.args
            if len(args) >= 2 and isinstance(args[0], ast.Name) and isinstance(args[1], ast.Constant):
                out.add((args[0].id, str(args[1].value)))
    return out


def _class_nodes(nodes: list, prefix: str):
    for node in nodes:
        yield f"{prefix}{node.name}", node
        inner = [n for n in node.body if isinstance(n, ast.ClassDef)]
        yield from _class_nodes(inner, f"{prefix}{node.name}.")


def _codes(code, out: dict) -> None:
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            out.setdefault(getattr(const, "co_qualname", const.co_name), []).append(const)
            _codes(const, out)


class SourceModel:
    """What the file ``path`` defines (module docstring)."""

    def __init__(self, path: str) -> None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tree = ast.parse(text, path)
        self.path = path
        scope = _Scope()
        scope.walk(tree.body)
        self.globals = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
        self.names = scope.names | self.globals
        self.defs = scope.def_kinds()
        self.unconditional = scope.unconditional
        self.star_imports = scope.star_imports
        self.literals = {k: v for k, v in scope.literals().items() if k not in self.globals}
        self.classes: dict = {}
        for node in scope.classes:
            _class(node, "", self.classes)
        for obj, attr in _attribute_sets(tree):
            if obj in self.classes:
                self.classes[obj].outside.add(attr)
        for cs, node in _class_nodes(scope.classes, ""):
            cs_ = self.classes.get(cs)
            if cs_ is not None:  # `cls.x = ...` / `setattr(cls, "x", ...)` in the class's own methods
                cs_.outside |= {a for o, a in _attribute_sets(node) if o == "cls"}
                cs_.literals = {k: v for k, v in cs_.literals.items() if k not in cs_.outside}
        self.codes: dict = {}
        _codes(compile(text, path, "exec", dont_inherit=True), self.codes)
