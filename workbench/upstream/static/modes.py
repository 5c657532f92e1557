"""SGLang's `ForwardMode` read from source: its members and what each `is_*()` predicate accepts.

The predicates are evaluated by a small interpreter over their AST (`==`, `in`, `and`, `or`,
`not`, `if`-expressions, calls to other predicates, keyword defaults); nothing is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class ForwardModes:
    """Members of ForwardMode and its predicates (name -> FunctionDef)."""

    members: list[str]
    predicates: dict[str, ast.FunctionDef] = field(default_factory=dict)
    line: int = 0
    enum: str = "ForwardMode"  # the enum class whose members `Enum.X` name (SpeculativeAlgorithm too)

    def accepts(self, predicate: str, kwargs: dict | None = None) -> set[str] | None:
        """Members for which `ForwardMode.<m>.<predicate>(**kwargs)` is true; None if unknown."""
        func = self.predicates.get(predicate)
        if func is None:
            return None
        out = set()
        for member in self.members:
            value = self._call(func, member, kwargs or {}, depth=0)
            if value is None:
                return None
            if value:
                out.add(member)
        return out

    def _call(self, func: ast.FunctionDef, member: str, kwargs: dict, depth: int) -> bool | None:
        if depth > 8:
            return None
        args = func.args
        params = [a.arg for a in args.args[1:]]
        defaults = dict(zip(params[len(params) - len(args.defaults) :], args.defaults, strict=False))
        env = {}
        for name in params:
            if name in kwargs:
                env[name] = kwargs[name]
            elif name in defaults and isinstance(defaults[name], ast.Constant):
                env[name] = defaults[name].value
            else:
                return None
        body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return None
        return self._eval(body[0].value, member, env, depth)

    def _eval(self, node: ast.expr, member: str, env: dict, depth: int):  # noqa: C901
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env.get(node.id) if node.id != "self" else ("member", member)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self.enum:
            return ("member", node.attr)
        if isinstance(node, ast.BoolOp):
            values = [self._eval(v, member, env, depth) for v in node.values]
            if any(v is None for v in values):
                return None
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            value = self._eval(node.operand, member, env, depth)
            return None if value is None else not value
        if isinstance(node, ast.IfExp):
            test = self._eval(node.test, member, env, depth)
            if test is None:
                return None
            return self._eval(node.body if test else node.orelse, member, env, depth)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [self._eval(e, member, env, depth) for e in node.elts]
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self._eval(node.left, member, env, depth)
            right = self._eval(node.comparators[0], member, env, depth)
            op = node.ops[0]
            if left is None or right is None:
                return None
            if isinstance(op, (ast.Eq, ast.Is)):
                return left == right
            if isinstance(op, (ast.NotEq, ast.IsNot)):
                return left != right
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, list):
                return (left in right) == isinstance(op, ast.In)
            return None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            callee = self.predicates.get(node.func.attr)
            if callee is None or node.args:
                return None
            kwargs = {k.arg: self._eval(k.value, member, env, depth) for k in node.keywords}
            return self._call(callee, member, kwargs, depth + 1)
        return None


def parse_forward_modes(source: str, enum: str = "ForwardMode") -> ForwardModes | None:
    """The ForwardMode enum of `forward_batch_info.py`'s source (or another enum with `is_*()`
    predicates, e.g. `SpeculativeAlgorithm`), or None if absent."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == enum:
            members = [
                t.id
                for s in node.body
                if isinstance(s, ast.Assign)
                for t in s.targets
                if isinstance(t, ast.Name) and t.id.isupper()
            ]
            preds = {s.name: s for s in node.body if isinstance(s, ast.FunctionDef) and s.name.startswith("is_")}
            return ForwardModes(members, preds, node.lineno, enum)
    return None


def predicate_call(node: ast.expr) -> tuple[str, dict] | None:
    """(predicate, constant kwargs) when `node` is `<...>forward_mode.is_x(...)`."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("is_")
        and not node.args
    ):
        return None
    owner = node.func.value
    name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
    if not name.endswith("forward_mode") and name != "mode":
        return None
    kwargs = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
    return node.func.attr, kwargs


def mode_names(node: ast.AST) -> set[str]:
    """Every `ForwardMode.X` named in an expression."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "ForwardMode"
        and n.attr.isupper()
    }
