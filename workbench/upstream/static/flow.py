"""Where spec-input objects flow: from a construction to the expression that installs it.

A value is a set of origins: a spec-input construction (`Cls(...)`, `Cls.create_idle_input(...)`,
`cls(...)` in a classmethod, a factory) with the steps it took to get where it is used: returned by
a function (any depth) and bound by its caller, held in a local, chosen from a dict literal or a
conditional expression, `self` in a spec input's own method (`batch.spec_info = self`: an instance
of each spec-input class that runs that method), returned in a tuple and unpacked (`x, ok = f()`:
each name may hold any element), copied by `dataclasses.replace` / `copy.copy`, passed as a
parameter (`Param` markers, resolved by the caller), or read as the field of a result object the
flow sees built (`out = self.verify(b); out.draft_extend_input`: the value `C(draft_extend_input=v)`
/ `cls(...)` gave it, by keyword, `__init__` parameter or dataclass position, or a
`out.draft_extend_input = v` patch before `out` is returned). Not followed: an input stored in an
attribute of an object the flow does not see built and read back elsewhere (`result.next_draft_input
= x`, installed by the scheduler next round from a parameter): a flow through every such field joins
every worker's result into every install and buries the findings in noise.
Calls resolve as `program.Index` says (types read from the sources, else by name): an
over-approximation, more flow, never less. Loads of `.spec_info` itself are opaque (an installed
input moving on is not a new install).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .program import Func, Index, _callee_name, _own_nodes, parse

__all__ = ["Func", "Origin", "Param", "Program", "_callee_name", "_own_nodes", "ordered", "parse"]
_COPIES = {"replace", "copy", "deepcopy", "_replace"}
_MAX_DEPTH = 8
_MAX_HOPS = 16  # locals and returns a field's object is followed through


@dataclass(frozen=True)
class Origin:
    """One spec-input construction and how it travelled (`via`, outermost step first)."""

    cls: str
    how: str
    file: str
    line: int
    idle: bool
    via: tuple[str, ...] = ()

    def step(self, what: str) -> Origin:
        return Origin(self.cls, self.how, self.file, self.line, self.idle, (what, *self.via)[:6])


@dataclass(frozen=True)
class Param:
    """The value of a parameter of the function being summarised."""

    name: str


def _order_key(v: Origin | Param) -> tuple:
    if isinstance(v, Param):
        return (1, 0, (), v.name, "", 0, "", False)
    return (0, len(v.via), v.via, v.cls, v.file, v.line, v.how, v.idle)


def ordered(values: frozenset | set) -> list:
    """`values` (origins and params) in a defined order: origins first, the shortest `via` first, then
    by the steps, class, construction site, how and idleness; params by name. Walking a value in this
    order, rather than in hash order, makes the memoised flow (and so the lint's output) the same
    under every `PYTHONHASHSEED`."""
    return sorted(values, key=_order_key)


class Program(Index):
    """`Index` plus the values expressions carry (see the module docstring)."""

    def __init__(self, files: dict[str, str], spec_classes: dict[str, dict]):
        super().__init__(files, spec_classes)
        self._selfs: dict[tuple[str, str], frozenset] = {}

    # -- values ---------------------------------------------------------------------------
    def value(self, expr: ast.expr | None, where: Func, bind: str | None = None, depth: int = 0) -> frozenset:
        """Origins (and `Param`s of `where`) the expression may evaluate to."""
        if expr is None or depth > _MAX_DEPTH:
            return frozenset()
        v = self._value(expr, where, bind, depth)
        return frozenset(v)

    def _value(self, e: ast.expr, where: Func, bind: str | None, depth: int) -> set:  # noqa: C901
        rec = lambda x, step=None: {  # noqa: E731
            o.step(step) if step and isinstance(o, Origin) else o for o in self.value(x, where, bind, depth + 1)
        }
        if isinstance(e, ast.Call):
            return self._call(e, where, bind, depth)
        if isinstance(e, ast.Name):
            if e.id == "self" and "self" not in where.locals:
                return set(self._self_origins(where))
            if e.id in where.locals:
                out: set = set()
                for v in where.locals[e.id]:
                    out |= rec(v, f"local {e.id}")
                return out
            return {Param(e.id)} if e.id in where.params else set()
        if isinstance(e, ast.IfExp):
            return rec(e.body, "conditional") | rec(e.orelse, "conditional")
        if isinstance(e, (ast.Tuple, ast.List)):
            return set().union(set(), *(rec(v, "tuple") for v in e.elts))
        if isinstance(e, ast.BoolOp):
            return set().union(*(rec(v, "or/and") for v in e.values))
        if isinstance(e, ast.Subscript):
            base = e.value
            if isinstance(base, ast.Name) and base.id in where.locals:
                base = next((v for v in where.locals[base.id] if isinstance(v, (ast.Dict, ast.List, ast.Tuple))), base)
            if isinstance(base, ast.Dict):
                return set().union(set(), *(rec(v, "dict") for v in base.values))
            if isinstance(base, (ast.List, ast.Tuple)):
                return set().union(set(), *(rec(v, "sequence") for v in base.elts))
            return set()
        if isinstance(e, ast.Attribute) and e.attr != "spec_info":
            return {
                o.step(f"field {e.attr}") if isinstance(o, Origin) else o for o in self._field(e, where, bind, depth)
            }
        if isinstance(e, (ast.Starred, ast.Await)):
            return rec(e.value)
        if isinstance(e, ast.NamedExpr):
            return rec(e.value)
        return set()

    def _call(self, e: ast.Call, where: Func, bind: str | None, depth: int) -> set:
        f = e.func
        name = _callee_name(e)
        line = (where.file, e.lineno)
        if isinstance(f, ast.Name) and f.id in self.spec:
            return {Origin(f.id, "constructor", *line, False)}
        if isinstance(f, ast.Name) and f.id == "cls" and where.is_classmethod and (bind or where.owner) in self.spec:
            return {Origin(bind or where.owner, f"cls() in {where.name}", *line, "idle" in where.name)}
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            owner = f.value.id
            if owner == "cls" and where.is_classmethod:
                owner = bind or where.owner or ""
            if owner in self.spec:
                m = self.method(owner, f.attr)
                got = {o.step(f"{owner}.{f.attr}") for o in self._returns_of(m, owner, depth)} if m else set()
                got = {o for o in got if isinstance(o, Origin)}
                if not got and f.attr.startswith("create"):
                    got = {Origin(owner, f.attr, *line, "idle" in f.attr)}
                return {
                    Origin(o.cls, o.how, o.file, o.line, o.idle or "idle" in f.attr, o.via) if o.cls == owner else o
                    for o in got
                }
        if name in _COPIES and (e.args or isinstance(f, ast.Attribute)):
            src = e.args[0] if e.args else f.value  # replace(x, ...) / x._replace(...)
            return {o.step(name) if isinstance(o, Origin) else o for o in self.value(src, where, bind, depth + 1)}
        if name in ("get", "pop") and isinstance(f, ast.Attribute):
            return {
                o.step("dict") if isinstance(o, Origin) else o
                for o in self.value(ast.Subscript(value=f.value, slice=ast.Constant(0)), where, bind, depth + 1)
            }
        out: set = set()
        for callee, cbind in self.callees(e, where):
            for o in ordered(self._returns_of(callee, cbind, depth)):
                if isinstance(o, Param):
                    out |= {
                        x.step(f"param {o.name} of {callee.name}") if isinstance(x, Origin) else x
                        for x in self.value(self.argument(e, callee, o.name), where, bind, depth + 1)
                    }
                else:
                    out.add(o.step(f"returned by {callee.qualname}"))
        return out

    def _self_origins(self, where: Func) -> frozenset:
        """What `self` may be in an instance method of a spec input (or of a base it inherits the
        method from): an instance of every spec-input class whose lookup of the method lands on
        `where` (a subclass that overrides it runs its own). Empty outside such a method."""
        a = where.node.args
        first = [x.arg for x in [*a.posonlyargs, *a.args]][:1]
        if where.owner is None or where.is_classmethod or first != ["self"]:
            return frozenset()
        if any(getattr(d, "id", None) == "staticmethod" for d in where.node.decorator_list):
            return frozenset()
        key = (where.file, where.qualname)
        if key not in self._selfs:
            self._selfs[key] = frozenset(
                Origin(c, f"self in {where.qualname}", where.file, where.node.lineno, False)
                for c in sorted(self.spec)
                if self.method(c, where.name) is where
            )
        return self._selfs[key]

    # -- fields of result objects ------------------------------------------------------------
    def _field(self, e: ast.Attribute, where: Func, bind: str | None, depth: int) -> set:
        """What `obj.attr` may hold when `obj` is an object this flow sees built: a local bound to a
        construction `C(attr=v)` (keyword, `__init__` parameter stored as `self.attr`, or dataclass
        position) or to a call returning one (any depth), plus `obj.attr = v` stores in `where`."""
        obj, attr = e.value, e.attr
        key = (id(where.node), ast.dump(obj), attr, bind)
        if depth > _MAX_DEPTH or key in self._busy_fields:
            return set()
        self._busy_fields.add(key)
        try:
            return self._field_of(obj, attr, where, bind, depth)
        finally:
            self._busy_fields.discard(key)

    def _field_of(self, obj: ast.expr, attr: str, where: Func, bind: str | None, depth: int, hops: int = 0) -> set:
        out: set = set()
        if hops > _MAX_HOPS:
            return out
        if isinstance(obj, ast.Name) and obj.id in where.locals:
            for v in where.locals[obj.id]:
                out |= self._field_of(v, attr, where, bind, depth, hops + 1)
            for node in where.nodes:  # `obj.attr = v` (a result object patched before it is returned)
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and t.attr == attr and getattr(t.value, "id", None) == obj.id:
                            out |= self.value(node.value, where, bind, depth + 1)
            return out
        if not isinstance(obj, ast.Call):
            return out
        f = obj.func
        built = f.id if isinstance(f, ast.Name) and f.id in self.bases and f.id not in self.spec else None
        if isinstance(f, ast.Name) and f.id == "cls" and where.is_classmethod:
            built = bind or where.owner
        if built:
            return set(self.value(self._constructor_argument(obj, built, attr), where, bind, depth + 1))
        for callee, cbind in self.callees(obj, where):
            for node in callee.nodes:
                if not (isinstance(node, ast.Return) and node.value is not None):
                    continue
                for o in ordered(self._field_of(node.value, attr, callee, cbind, depth, hops + 1)):
                    if isinstance(o, Param):
                        arg = self.argument(obj, callee, o.name)
                        out |= {
                            x.step(f"param {o.name} of {callee.name}") if isinstance(x, Origin) else x
                            for x in self.value(arg, where, bind, depth + 1)
                        }
                    else:
                        out.add(o.step(f"returned by {callee.qualname}"))
        return out

    def _constructor_argument(self, call: ast.Call, cls: str, attr: str) -> ast.expr | None:
        """The expression `cls(...)` passes for its field `attr`."""
        for k in call.keywords:
            if k.arg == attr:
                return k.value
        init = self.method(cls, "__init__")
        if init is not None:
            for node in init.nodes:
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in init.params
                    and any(isinstance(t, ast.Attribute) and t.attr == attr for t in node.targets)
                ):
                    return self.argument(call, init, node.value.id)
            return None
        names = self.dataclass_fields(cls)
        args = [a for a in call.args if not isinstance(a, ast.Starred)]
        return args[names.index(attr)] if attr in names and names.index(attr) < len(args) else None

    @staticmethod
    def argument(call: ast.Call, callee: Func, param: str) -> ast.expr | None:
        """The expression a call passes for `param` of `callee`."""
        for k in call.keywords:
            if k.arg == param:
                return k.value
        params = callee.params
        if param in params:
            i = params.index(param)
            args = [a for a in call.args if not isinstance(a, ast.Starred)]
            if i < len(args):
                return args[i]
        return None

    def _returns_of(self, func: Func | None, bind: str | None, depth: int) -> frozenset:
        if func is None:
            return frozenset()
        key = (id(func.node), bind)
        if key in self._returns:
            return self._returns[key]
        if key in self._busy or depth > _MAX_DEPTH:
            return frozenset()
        self._busy.add(key)
        out: set = set()
        for node in func.nodes:
            if isinstance(node, ast.Return) and node.value is not None:
                out |= self.value(node.value, func, bind, depth + 1)
        self._busy.discard(key)
        self._returns[key] = frozenset(out)
        return self._returns[key]
