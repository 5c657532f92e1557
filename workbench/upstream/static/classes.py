"""What an instance of each SGLang `SpecInput` subclass has, read from source (no import).

An attribute is present when the class or a base defined in the sources declares it: a
dataclass field or class attribute (annotated or assigned, `SpecInput`'s defaults included),
a method or property, or a `self.<name> = ...` in `__init__` / `__post_init__`. Assignments in
other methods are recorded apart (`set_later`): an instance only has them once that method ran.
"""

from __future__ import annotations

import ast

from .flow import parse

SPEC_BASE = "SpecInput"


def _name(node: ast.expr) -> str:
    """The bare name of a base class or decorator expression (`a.B` -> `B`, `B[T]` -> `B`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ast.unparse(node)


_CTOR = ("__init__", "__post_init__")


def _self_assigns(func: ast.FunctionDef) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in ast.walk(func):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        )
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "self":
                    out.setdefault(el.attr, node.lineno)
    return out


def _input_type(func: ast.FunctionDef) -> tuple[str, ...] | None:
    """The `SpecInputType` members an instance may have: `(X,)` for `super().__init__(SpecInputType.X)`
    (or `SpecInput.__init__(self, ...X)`); for `super().__init__(self.spec_input_type)`, every member
    the function names (the check that the field holds one of them)."""
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__":
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Attribute) and _name(arg.value) == "SpecInputType":
                    return (arg.attr,)
                if isinstance(arg, ast.Attribute) and arg.attr == "spec_input_type":
                    named = sorted(
                        {
                            n.attr
                            for n in ast.walk(func)
                            if isinstance(n, ast.Attribute) and _name(n.value) == "SpecInputType"
                        }
                    )
                    return tuple(named) or None
    return None


def _class_info(fname: str, cls: ast.ClassDef) -> dict:
    attrs: dict[str, dict] = {}
    later: dict[str, dict] = {}
    input_type = None
    predicates: dict[str, list[str]] = {}
    for stmt in cls.body:
        where = {"file": fname, "line": stmt.lineno, "class": cls.name}
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            attrs.setdefault(stmt.target.id, {**where, "how": "field" if stmt.value is None else "field with default"})
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    attrs.setdefault(t.id, {**where, "how": "class attribute"})
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decos = {_name(d) for d in stmt.decorator_list}
            attrs.setdefault(
                stmt.name,
                {**where, "how": "property" if "property" in decos or "cached_property" in decos else "method"},
            )
            assigns = _self_assigns(stmt)
            bucket = attrs if stmt.name in _CTOR else later
            for attr, line in assigns.items():
                bucket.setdefault(
                    attr, {"file": fname, "line": line, "class": cls.name, "how": f"self.{attr} in {stmt.name}"}
                )
            if stmt.name in _CTOR:
                input_type = input_type or _input_type(stmt)
            if stmt.name.startswith("is_") and stmt.name.endswith("_input"):
                names = [
                    n.attr for n in ast.walk(stmt) if isinstance(n, ast.Attribute) and _name(n.value) == "SpecInputType"
                ]
                if names:
                    predicates[stmt.name] = names
    decorators = [_name(d.func if isinstance(d, ast.Call) else d) for d in cls.decorator_list]
    return {
        "file": fname,
        "line": cls.lineno,
        "bases": [_name(b) for b in cls.bases],
        "dataclass": "dataclass" in decorators,
        "own": attrs,
        "set_later": later,
        "input_type": input_type,
        "type_predicates": predicates,
        "dynamic": "__getattr__" in attrs,
    }


def collect(sources: dict[str, str]) -> dict[str, dict]:
    """Every top-level class of `sources` ({relpath: text}), first definition wins."""
    classes: dict[str, dict] = {}
    for fname, text in sorted(sources.items()):
        tree = parse(fname, text)
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, _class_info(fname, node))
    return classes


def mro(name: str, classes: dict[str, dict]) -> list[str]:
    """`name` then its bases depth-first left to right, each once (an MRO approximation)."""
    seen, order, stack = set(), [], [name]
    while stack:
        cur = stack.pop(0) if not order else stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        order.append(cur)
        stack.extend(reversed(classes.get(cur, {}).get("bases", [])))
    return order


def spec_input_classes(sources: dict[str, str]) -> dict[str, dict]:
    """SpecInput subclasses: {name: {file, line, bases, attrs, set_later, input_type, ...}}.

    attrs maps each attribute an instance has to where it comes from (nearest class first).
    `unresolved_bases` lists bases not defined in the sources (their attributes are unknown).
    """
    classes = collect(sources)
    base_info = classes.get(SPEC_BASE, {})
    predicates = base_info.get("type_predicates", {})
    out: dict[str, dict] = {}
    for name, info in classes.items():
        chain = mro(name, classes)
        if name == SPEC_BASE or SPEC_BASE not in chain:
            continue
        attrs: dict[str, dict] = {}
        later: dict[str, dict] = {}
        input_type = None
        for cls in chain:
            c = classes.get(cls)
            if c is None:
                continue
            for k, v in c["own"].items():
                attrs.setdefault(k, v)
            for k, v in c["set_later"].items():
                later.setdefault(k, v)
            input_type = input_type or c["input_type"]
        trivial = {"ABC", "object", "Generic", "Protocol", "IntEnum", "Enum"}
        out[name] = {
            "file": info["file"],
            "line": info["line"],
            "bases": info["bases"],
            "mro": [c for c in chain if c in classes],
            "dataclass": info["dataclass"],
            "attrs": attrs,
            "set_later": {k: v for k, v in later.items() if k not in attrs},
            "input_type": input_type,
            "dynamic": any(classes.get(c, {}).get("dynamic") for c in chain),
            "type_predicates": {
                p: next(iter(vals))
                for p, types in predicates.items()
                if input_type and len(vals := {t in types for t in input_type}) == 1
            },
            "unresolved_bases": sorted(
                b
                for c in chain
                for b in classes.get(c, {}).get("bases", [])
                if b not in classes and b not in trivial and not b.startswith("Generic")
            ),
        }
    return out
