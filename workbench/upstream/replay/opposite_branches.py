"""Which read a replay's path excluded: the two lines sit in opposite branches of one ``if``.

When a replay raised at line R of a backend file before a finding's read at line L ran, and R and L
are in opposite branches (body / ``else``) of the same ``if`` with no loop around that ``if`` inside
the function, the call that raised took the branch without L: on that input the read is not made.
"""

from __future__ import annotations

import ast


def _span(stmts: list[ast.stmt]) -> tuple[int, int] | None:
    return (stmts[0].lineno, stmts[-1].end_lineno or stmts[-1].lineno) if stmts else None


def _inside(line: int, span: tuple[int, int] | None) -> bool:
    return span is not None and span[0] <= line <= span[1]


def other_branch(source: str, read_line: int, raised_line: int) -> int | None:
    """The line of the ``if`` that separates the two lines (see the module docstring), else None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        span = (func.lineno, func.end_lineno or func.lineno)
        if not (_inside(read_line, span) and _inside(raised_line, span)):
            continue
        found = None
        loops = [n for n in ast.walk(func) if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]
        for node in ast.walk(func):
            if not isinstance(node, ast.If):
                continue
            body, orelse = _span(node.body), _span(node.orelse)
            split = (_inside(read_line, body) and _inside(raised_line, orelse)) or (
                _inside(read_line, orelse) and _inside(raised_line, body)
            )
            looped = any(_inside(node.lineno, (lp.lineno, lp.end_lineno or lp.lineno)) for lp in loops)
            if split and not looped and (found is None or node.lineno > found):
                found = node.lineno
        if found is not None:
            return found
    return None
