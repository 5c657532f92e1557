"""Which spec-input class is installed as a batch's `spec_info`, where, and in which forward mode.

An install site is `<x>.spec_info = v`, `setattr(<x>, "spec_info", v)` or a `spec_info=v` keyword
(a `ForwardBatch(...)`, `dataclasses.replace(batch, ...)`; not the CUDA-graph metadata calls,
whose `spec_info` argument never becomes a batch's). `flow.Program` says which classes `v` may
be, however they got there; a parameter installed by a helper is resolved at the helper's
callers (kind `helper`). The forward mode: an idle input (`create_idle_input`, an idle factory)
is IDLE; otherwise the `forward_mode` the batch gets nearest after the install (in the function,
or in the callees the batch is passed to next, `DEPTH` calls deep), else nearest before it, else one
read off the function's name. An assignment under an `is_idle()` test, or `IDLE if ... else X`,
keeps IDLE possible. An install no rule gives a mode is returned apart (`mode_from: "unknown"`).
"""

from __future__ import annotations

import ast

from .flow import Func, Origin, Param, Program, _callee_name, ordered
from .modes import mode_names

_NAME_MODES = (
    ("prefill", ("EXTEND", "IDLE")),
    ("draft_extend", ("DRAFT_EXTEND", "DRAFT_EXTEND_V2", "IDLE")),
    ("verify", ("TARGET_VERIFY", "IDLE")),
    ("draft", ("DECODE", "IDLE")),
    ("extend", ("EXTEND", "IDLE")),
)
_NOT_INSTALLS = ("cuda_graph", "init_forward_metadata")
# how many calls deep a batch is followed for the mode it gets next: three, as a v2 worker's
# `batch.spec_info = verify_input` reaches TARGET_VERIFY only through verify -> run_eagle_verify ->
# eagle_prepare_for_verify (0.5.23)
DEPTH = 3


def install_sites(fn: Func) -> list[tuple[ast.expr, int, str, str | None]]:
    """(value, line, kind, batch variable) of every install in `fn`."""
    out = []
    for node in fn.nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "spec_info" and node.value is not None:
                    out.append((node.value, node.lineno, "assign", getattr(t.value, "id", None)))
        elif isinstance(node, ast.Call):
            name = _callee_name(node) or ""
            if name == "setattr" and len(node.args) == 3 and getattr(node.args[1], "value", None) == "spec_info":
                out.append((node.args[2], node.lineno, "setattr", getattr(node.args[0], "id", None)))
            elif not any(s in name for s in _NOT_INSTALLS):
                for k in node.keywords:
                    if k.arg == "spec_info":
                        batch = getattr(node.args[0], "id", None) if node.args else None
                        out.append((k.value, node.lineno, "keyword", batch))
    return out


def _under_idle_test(fn: Func) -> dict[int, bool]:
    """{id(stmt): whether an enclosing `if` tests `is_idle()`} for the statements of `fn`."""
    out: dict[int, bool] = {}

    def walk(body: list, idle: bool) -> None:
        for stmt in body:
            out[id(stmt)] = idle
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            inner = idle
            if isinstance(stmt, (ast.If, ast.While)):
                inner = idle or any(
                    _callee_name(n) == "is_idle" for n in ast.walk(stmt.test) if isinstance(n, ast.Call)
                )
            for name in ("body", "orelse", "finalbody"):
                block = getattr(stmt, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    walk(block, inner)
            for h in getattr(stmt, "handlers", []):
                walk(h.body, inner)

    walk(fn.node.body, False)
    return out


def mode_assignments(fn: Func, members: set[str]) -> list[tuple[int, set[str]]]:
    """(line, modes) of every `forward_mode` a statement of `fn` assigns (IDLE added under an is_idle test)."""
    idle_at = _under_idle_test(fn)
    out = []
    for node in fn.nodes:
        if not isinstance(node, ast.stmt):
            continue
        values = []
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "forward_mode" for t in node.targets
        ):
            values.append(node.value)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return, ast.AugAssign)):
            for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
                values += [k.value for k in call.keywords if k.arg == "forward_mode"]
        for v in values:
            names = mode_names(v) & members
            if names:
                if idle_at.get(id(node)) and "IDLE" in members:
                    names = names | {"IDLE"}
                out.append((node.lineno, names))
    return out


class InstallScanner:
    """Installs of spec inputs across a program (see the module docstring)."""

    def __init__(self, program: Program, members: list[str]):
        self.p, self.members = program, set(members)
        self._callers: dict[str, list[tuple[Func, ast.Call]]] | None = None
        self._assigned: dict[int, list[tuple[int, set[str]]]] = {}
        self._first: dict[tuple, set[str]] = {}

    def callers(self, fn: Func) -> list[tuple[Func, ast.Call]]:
        """(caller, call) pairs whose call may run `fn`."""
        if self._callers is None:
            self._callers = {}
            for f in self.p.funcs:
                for node in f.nodes:
                    if isinstance(node, ast.Call) and (name := _callee_name(node)):
                        self._callers.setdefault(name, []).append((f, node))
        return [(f, c) for f, c in self._callers.get(fn.name, []) if any(x is fn for x, _ in self.p.callees(c, f))]

    def modes_at(self, fn: Func, line: int, batch: str | None) -> tuple[set[str], str]:
        """The modes the batch installed at `line` of `fn` runs in, and which rule gave them."""
        after = self.first_modes(fn, line, batch, 0)
        if after:
            return after, "assigned"
        before = sorted(((ln, s) for ln, s in self.assigned(fn) if ln < line), key=lambda x: -x[0])
        if before:
            return set(before[0][1]), "assigned"
        for key, modes in _NAME_MODES:
            if key in fn.name:
                return {m for m in modes if m in self.members}, "name"
        return set(), "unknown"

    def first_modes(self, fn: Func, line: int, batch: str | None, depth: int) -> set[str]:
        """The first `forward_mode` set at or after `line` in `fn`: by its own statements, or by a call
        that passes the batch along (every callee the call may run, `DEPTH` calls deep)."""
        key = (id(fn.node), line, batch, depth)
        if key in self._first:
            return self._first[key]
        self._first[key] = set()
        events: list[tuple[int, int, object]] = [(ln, 0, s) for ln, s in self.assigned(fn) if ln >= line]
        if depth < DEPTH:
            for node in fn.nodes:
                if isinstance(node, ast.Call) and node.lineno >= line:
                    args = [*node.args, *(k.value for k in node.keywords)]
                    if batch is None or any(isinstance(a, ast.Name) and a.id == batch for a in args):
                        events.append((node.lineno, 1, node))
        out: set[str] = set()
        for _ln, kind, what in sorted(events, key=lambda e: (e[0], e[1])):
            if kind == 0:
                out = set(what)  # type: ignore[arg-type]
            else:
                for callee, _ in self.p.callees(what, fn):  # type: ignore[arg-type]
                    inner = self._param_for(what, callee, batch, fn)  # type: ignore[arg-type]
                    out |= self.first_modes(callee, callee.node.lineno, inner, depth + 1)
            if out:
                break
        self._first[key] = out
        return out

    @staticmethod
    def _param_for(call: ast.Call, callee: Func, batch: str | None, fn: Func) -> str | None:
        """The parameter of `callee` that receives the batch variable (None: any call counts)."""
        for k in call.keywords:
            if isinstance(k.value, ast.Name) and k.value.id == batch:
                return k.arg
        params = callee.params
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Name) and a.id == batch and i < len(params):
                return params[i]
        return None

    def assigned(self, fn: Func) -> list[tuple[int, set[str]]]:
        """`mode_assignments` of `fn`, memoised."""
        key = id(fn.node)
        if key not in self._assigned:
            self._assigned[key] = mode_assignments(fn, self.members)
        return self._assigned[key]

    def scan(self) -> list[dict]:
        """Every install of a spec input: class, how, kind, via, modes, mode_from, where built and installed.

        One record per construction site and install site. Where several paths lead from one to the
        other, the record's modes are all of theirs, and its `via`, `how`, `kind` and `mode_from`
        are those of the shortest path (ties: the first by its steps, see `flow.ordered`), so the
        record is the same whatever order the paths were found in."""
        out: dict[tuple, dict] = {}
        for fn in self.p.funcs:
            for value, line, kind, batch in install_sites(fn):
                for o in ordered(self.p.value(value, fn)):
                    for origin, how in self._resolve(o, fn, kind, 0):
                        self._record(out, origin, how, fn, line, batch)
        return sorted(out.values(), key=lambda r: (r["class"], r["install_file"], r["install_line"], r["built_at"]))

    def _resolve(self, o, fn: Func, kind: str, depth: int) -> list[tuple[Origin, str]]:
        if isinstance(o, Origin):
            return [(o, kind)]
        if not isinstance(o, Param) or depth > 2:
            return []
        found = []
        for caller, call in self.callers(fn):
            arg = Program.argument(call, fn, o.name)
            for x in ordered(self.p.value(arg, caller)):
                step = x.step(f"param {o.name} of {fn.name}") if isinstance(x, Origin) else x
                found += [(y, "helper") for y, _ in self._resolve(step, caller, kind, depth + 1)]
        return found

    def _record(self, out: dict, o: Origin, kind: str, fn: Func, line: int, batch: str | None) -> None:
        if o.idle:
            modes, source = ({"IDLE"} & self.members) or set(), "idle input"
        else:
            modes, source = self.modes_at(fn, line, batch)
        if kind != "helper" and o.via:
            first = o.via[0].split(" ")[0]
            kind = {"returned": "return", "local": kind, "param": "helper"}.get(first, first)
        if o.idle and kind in ("assign", "keyword"):
            kind = "idle_input"
        key = (o.cls, o.file, o.line, fn.file, line)
        new = {
            "class": o.cls,
            "how": o.how,
            "kind": kind,
            "via": list(o.via),
            "modes": sorted(modes),
            "mode_from": source,
            "built_at": f"{o.file}:{o.line}",
            "install_file": fn.file,
            "install_line": line,
            "install_function": fn.qualname,
            "batch": batch,
        }
        old = out.get(key)
        if old is not None:
            new["modes"] = sorted(set(old["modes"]) | modes)
            if _path_rank(old) <= _path_rank(new):
                new = {**old, "modes": new["modes"]}
        out[key] = new


def _path_rank(rec: dict) -> tuple:
    """The order in which one install's paths are preferred: the shortest `via`, then by its steps."""
    return (len(rec["via"]), rec["via"], rec["how"], rec["kind"], rec["mode_from"], rec["batch"] or "")


def scan_installs(program: Program, members: list[str]) -> list[dict]:
    """Installs of spec inputs in `program` (see `InstallScanner`)."""
    return InstallScanner(program, members).scan()
