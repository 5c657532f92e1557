"""The forward-mode tests and other conditions around every call and statement of a function.

`branches(fn, modes)` walks a function's statements: an `if` whose test is a `ForwardMode`
predicate (`forward_batch.forward_mode.is_idle()`, or a local bound to the mode: `mode.is_idle()`,
with `not` / `and` / `or`) narrows the modes of its body and of its `else`; `if ...: return`
narrows what follows; any other test is recorded, as its source, as a condition (`not (...)` in
the `else`); `if ...: raise` adds nothing to what follows (the raise ends everything).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .modes import ForwardModes, predicate_call
from .program import Func


def _mode_alias(fn: Func) -> set[str]:
    """Locals bound to a forward mode (`mode = forward_batch.forward_mode`)."""
    return {
        name
        for name, values in fn.locals.items()
        if any(isinstance(v, ast.Attribute) and v.attr == "forward_mode" for v in values)
    }


@dataclass
class Branches:
    """Per call / statement of a function: the modes its enclosing tests allow (None: any) and the
    other conditions around it (their source)."""

    modes: dict[int, frozenset | None]
    conds: dict[int, tuple[str, ...]]


def branches(fn: Func, fm: ForwardModes | None) -> Branches:
    """The mode tests and conditions around every node of `fn` (early returns narrow what follows)."""
    members = frozenset(fm.members) if fm else frozenset()
    aliases = _mode_alias(fn)
    out = Branches({}, {})

    def test_modes(test: ast.expr) -> tuple[frozenset | None, frozenset | None]:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            t, f = test_modes(test.operand)
            return f, t
        if isinstance(test, ast.BoolOp):
            parts = [test_modes(v) for v in test.values]
            if isinstance(test.op, ast.And):
                ts = [t for t, _ in parts if t is not None]
                return (frozenset.intersection(*ts) if ts else None), None
            fs = [f for _, f in parts if f is not None]
            return None, (frozenset.intersection(*fs) if fs else None)
        call = test
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and fm is not None:
            owner = call.func.value
            pred = predicate_call(call)
            if pred is None and isinstance(owner, ast.Name) and owner.id in aliases and not call.args:
                pred = (call.func.attr, {k.arg: getattr(k.value, "value", None) for k in call.keywords})
            if pred is not None:
                acc = fm.accepts(*pred)
                if acc is not None:
                    return frozenset(acc), members - frozenset(acc)
        return None, None

    def narrow(cur: frozenset | None, extra: frozenset | None) -> frozenset | None:
        if extra is None:
            return cur
        return extra if cur is None else cur & extra

    def mark(node: ast.AST, modes: frozenset | None, conds: tuple[str, ...]) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Call, ast.stmt)) and id(sub) not in out.modes:
                out.modes[id(sub)] = modes
                out.conds[id(sub)] = conds

    def walk(body: list[ast.stmt], modes: frozenset | None, conds: tuple[str, ...]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.If, ast.While)):
                t, f = test_modes(stmt.test)
                cond = () if t is not None or f is not None else (ast.unparse(stmt.test)[:120],)
                mark(stmt.test, modes, conds)
                out.modes[id(stmt)], out.conds[id(stmt)] = modes, conds
                walk(stmt.body, narrow(modes, t), conds + cond)
                neg = tuple(f"not ({c})" for c in cond)
                walk(stmt.orelse, narrow(modes, f), conds + neg)
                if stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)) and not stmt.orelse:
                    # past `if c: return`, `not c` holds; past `if c: raise`, nothing new (the raise ends everything)
                    modes = narrow(modes, f)
                    conds = conds + neg if isinstance(stmt.body[-1], ast.Return) else conds
                continue
            blocks = [getattr(stmt, n, None) for n in ("body", "orelse", "finalbody")]
            blocks = [b for b in blocks if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]
            if blocks or getattr(stmt, "handlers", None):
                out.modes[id(stmt)], out.conds[id(stmt)] = modes, conds
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.expr):
                        mark(child, modes, conds)
                for b in blocks:
                    walk(b, modes, conds)
                for h in getattr(stmt, "handlers", []):
                    walk(h.body, modes, conds)
                continue
            mark(stmt, modes, conds)

    walk(fn.node.body, None, ())
    return out
