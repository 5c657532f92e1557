"""Runner paths: which code hands a batch to an attention backend's `init_forward_metadata`, in which modes.

A *site* is a call `<x>.init_forward_metadata(fb)` outside the attention backends: the model
runner's eager decode / extend / idle paths, the prefill and CPU graph runners, draft workers.
Its modes are the forward-mode tests around it and around every call on the way to it (the
runner's dispatch `if mode.is_idle(): return self._execute_idle(...)`); its gate is every other
test around it (`forward_batch.batch_size > 0`: only a DP-padded idle batch). `reach[f][mode]`
is a witness chain from function `f` to a site that mode may take.

An install *reaches* a backend when the batch it installs, or one built from it
(`fb = ForwardBatch.init_new(batch, ...)`), is passed into code that reaches a site in the
install's mode before anything installs another `spec_info` on it. The walk follows the calls
the batch is passed to (their own statements first, four calls deep) and, when the install is a
helper's parameter or the batch is returned, the helper's callers. Where it goes is the path's
`fate` (a static judgement, no end of a run): `killed` (another input installed first), `graph`
(only CUDA-graph metadata: `init_forward_metadata_capture_cuda_graph` / `_replay_cuda_graph`),
`dropped` (the batch goes nowhere), `reaches` (with the path), or `escapes` (kept past the
function, e.g. carried to the scheduler's next round: not decided).
A finding is `unreachable` when every install of its class in its mode is killed, graph-only or
dropped. Calls are resolved by attribute types read from the sources (`self.model_runner:
ModelRunner`, `self.eager_runner = EagerRunner(...)`), else by name.
"""

from __future__ import annotations

import ast
import functools
from collections import deque

from .branches import Branches, branches
from .flow import Func, Program, _callee_name
from .modes import ForwardModes

SITE = "init_forward_metadata"
# Calls that take a batch but cannot forward it (builtins, logging, assertions)
_HARMLESS = {"len", "isinstance", "getattr", "hasattr", "id", "print", "str", "repr", "type", "bool", "debug", "info"}
_DP_TESTS = ("attn_dp", "dp_attention", "enable_dp_attention")
_MAX_DOWN, _MAX_UP = 4, 2


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is(node: ast.AST | None, names: set[str]) -> bool:
    """`node` is one of the batch's names itself (not an expression that mentions it)."""
    return isinstance(node, ast.Name) and node.id in names


def _derived(value: ast.expr, names: set[str]) -> bool:
    """`value` is the batch, or a batch built from it that keeps its spec_info: `batch`,
    `ForwardBatch.init_new(batch, ...)`, `copy(batch)`; not one given another `spec_info=`."""
    if _is(value, names):
        return True
    if isinstance(value, ast.Call) and any(_is(a, names) for a in [*value.args, *(k.value for k in value.keywords)]):
        other = [k for k in value.keywords if k.arg == "spec_info" and not _names_in(k.value) & names]
        return not other
    return False


@functools.lru_cache(maxsize=4096)
def dp_holds(cond: str) -> bool | None:
    """Whether a condition's source holds under DP attention: True when it tests DP attention (or
    an `or` with such a test), False for its negation (`not (enable_dp_attention or ...)`, the
    `else` of such a test), None when DP attention does not decide it."""

    def holds(e: ast.expr) -> bool | None:
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            inner = holds(e.operand)
            return None if inner is None else not inner
        if isinstance(e, ast.BoolOp):
            parts = [holds(v) for v in e.values]
            if isinstance(e.op, ast.Or):
                return True if True in parts else (False if all(p is False for p in parts) else None)
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if any(d in ast.unparse(e) for d in _DP_TESTS) else None

    try:
        return holds(ast.parse(cond, mode="eval").body)
    except SyntaxError:  # a condition cut at 120 characters
        return None


class Runners:
    """Sites, the modes that reach them from every function, and install walks (module docstring)."""

    def __init__(self, program: Program, fm: ForwardModes | None):
        self.p, self.fm = program, fm
        self.members = frozenset(fm.members) if fm else frozenset()
        self._br: dict[int, Branches] = {}
        self.edges: list[tuple[Func, ast.Call, Func]] = []
        self.sites: list[dict] = []
        for fn in program.funcs:
            for node in fn.nodes:
                if not isinstance(node, ast.Call):
                    continue
                if _callee_name(node) == SITE and isinstance(node.func, ast.Attribute):
                    br = self.br(fn)
                    modes = br.modes.get(id(node))
                    self.sites.append(
                        {
                            "function": fn.qualname,
                            "file": fn.file,
                            "line": node.lineno,
                            "backend": ast.unparse(node.func.value)[:80],
                            "draft": "draft" in ast.unparse(node.func.value).lower()
                            or "draft" in fn.file.rsplit("/")[-1],
                            "graph": "graph" in fn.qualname.lower() or "graph" in fn.file.rsplit("/")[-1],
                            "modes": sorted(self.members if modes is None else modes),
                            "conditions": list(br.conds.get(id(node), ())),
                            "_fn": fn,
                        }
                    )
                for callee, _ in program.callees(node, fn):
                    self.edges.append((fn, node, callee))
        self.reach = self._backward()

    def br(self, fn: Func) -> Branches:
        key = id(fn.node)
        if key not in self._br:
            self._br[key] = branches(fn, self.fm)
        return self._br[key]

    def allowed(self, fn: Func, node: ast.AST) -> frozenset:
        m = self.br(fn).modes.get(id(node))
        return self.members if m is None else m

    def _backward(self) -> dict[int, dict[str, list[dict]]]:
        """{id(function node): {mode: chain to a site}} by a worklist over the reversed call edges."""
        reach: dict[int, dict[str, list[dict]]] = {}
        callers: dict[int, list[tuple[Func, ast.Call]]] = {}
        for g, call, f in self.edges:
            callers.setdefault(id(f.node), []).append((g, call))

        def is_graph(fn: Func) -> bool:
            return "graph" in fn.qualname.lower() or "graph" in fn.file.rsplit("/", 1)[-1]

        # Two passes, breadth first so each function keeps its shortest chain: eager chains first
        # (not through a graph runner), then graph ones only where no eager chain exists.
        for eager in (True, False):
            work: deque[Func] = deque()
            for s in self.sites:
                fn = s["_fn"]
                if eager and (s["graph"] or is_graph(fn)):
                    continue
                step = {k: v for k, v in s.items() if k != "_fn"}
                for m in s["modes"]:
                    reach.setdefault(id(fn.node), {}).setdefault(m, [step])
                work.append(fn)
            seen = 0
            while work and seen < 20000:
                seen += 1
                f = work.popleft()
                for g, call in callers.get(id(f.node), []):
                    if eager and is_graph(g):
                        continue
                    allowed = self.allowed(g, call)
                    grew = False
                    for m, chain in reach.get(id(f.node), {}).items():
                        if m in allowed and m not in reach.setdefault(id(g.node), {}) and len(chain) < 12:
                            step = {"function": g.qualname, "file": g.file, "line": call.lineno}
                            reach[id(g.node)][m] = [step, *chain]
                            grew = True
                    if grew:
                        work.append(g)
        return reach

    # -- installs -------------------------------------------------------------------------
    def decisive(self, fn: Func, node: ast.AST, base: tuple[str, ...], mode: str) -> bool:
        """Whether `node` runs whenever the walk's start does: every condition around it (other than
        mode tests) also holds at the start, or, in IDLE, tests DP attention and is not its negation
        (an IDLE batch exists only under DP attention's MLP sync)."""
        conds = self.br(fn).conds.get(id(node), ())
        return all(
            c in base or (mode == "IDLE" and any(d in c for d in _DP_TESTS) and dp_holds(c) is not False) for c in conds
        )

    def idle_skips(self, fn: Func, node: ast.AST, mode: str) -> bool:
        """In IDLE, `node` never runs: a condition around it is false under DP attention."""
        return mode == "IDLE" and any(dp_holds(c) is False for c in self.br(fn).conds.get(id(node), ()))

    def follow(
        self, fn: Func, line: int, names: set[str], mode: str, depth: int = 0, up: int = 0, base: tuple = ()
    ) -> dict:
        """Where the batch bound to `names` after `line` of `fn` goes in `mode` (see the module docstring).

        A kill (another `spec_info` installed) ends the walk only when it is `decisive`; `base` holds
        the conditions around the walk's start."""
        names = set(names)
        graph = unresolved = None
        events = sorted(
            (n for n in fn.nodes if isinstance(n, (ast.Call, ast.Assign)) and n.lineno >= line),
            key=lambda n: (n.lineno, n.col_offset),
        )
        here = {"function": fn.qualname, "file": fn.file}
        for node in events:
            if mode not in self.allowed(fn, node) or self.idle_skips(fn, node, mode):
                continue
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and t.attr == "spec_info" and _names_in(t.value) & names:
                        if node.lineno > line and self.decisive(fn, node, base, mode):
                            return {"fate": "killed", "at": {**here, "line": node.lineno}}
                if _derived(node.value, names):
                    names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
                    names |= {
                        e.id
                        for t in node.targets
                        if isinstance(t, ast.Tuple)
                        for e in t.elts
                        if isinstance(e, ast.Name)
                    }
                continue
            name = _callee_name(node) or ""
            args = [*node.args, *(k.value for k in node.keywords)]
            passed = any(_is(a, names) for a in args)
            if (
                name == "setattr"
                and passed
                and node.lineno > line
                and getattr(node.args[1], "value", "") == "spec_info"
            ):
                return {"fate": "killed", "at": {**here, "line": node.lineno}}
            if not passed:
                continue
            if name == SITE:
                site = next((s for s in self.sites if s["file"] == fn.file and s["line"] == node.lineno), None)
                step = {k: v for k, v in (site or {}).items() if k != "_fn"} or {**here, "line": node.lineno}
                return {"fate": "reaches", "path": [step]}
            if "cuda_graph" in name:
                graph = graph or {**here, "line": node.lineno, "call": name}
                continue
            results = []
            callees = self.p.callees(node, fn)
            if not callees and name not in _HARMLESS:
                unresolved = unresolved or {**here, "line": node.lineno, "call": name}
            for callee, _ in callees:
                inner = self._params_for(node, callee, names)
                res = None
                if depth < _MAX_DOWN and inner:
                    res = self.follow(callee, callee.node.lineno, inner, mode, depth + 1, up=_MAX_UP)
                    if res["fate"] == "reaches":
                        return {**res, "path": [{**here, "line": node.lineno}, *res["path"]]}
                chain = self.reach.get(id(callee.node), {}).get(mode)
                if chain and res is None:  # not walked (too deep): the call graph says it may reach
                    return {"fate": "reaches", "path": [{**here, "line": node.lineno}, *chain]}
                results.append(res)
            if (
                results
                and all(r is not None and r["fate"] == "killed" for r in results)
                and self.decisive(fn, node, base, mode)
            ):
                return results[0]  # every function the call may run installs another input first
            graph = graph or next((r["at"] for r in results if r is not None and r["fate"] == "graph"), None)
        returned = any(
            isinstance(n, ast.Return) and n.value is not None and _names_in(n.value) & names for n in fn.nodes
        )
        params = set(fn.params) & names
        if (returned or params) and up < _MAX_UP:
            outs = [self._up(fn, caller, call, names, returned, mode, up) for caller, call in self._callers(fn)]
            outs = [o for o in outs if o is not None]
            for o in outs:
                if o["fate"] == "reaches":
                    return o
            if outs and all(o["fate"] in ("killed", "graph", "dropped") for o in outs):
                return outs[0]
            return {"fate": "escapes", "at": {**here, "line": fn.node.lineno}}
        if returned or params:
            return {"fate": "escapes", "at": {**here, "line": fn.node.lineno}}
        if graph:
            return {"fate": "graph", "at": graph}
        if unresolved:  # handed to code the analysis cannot follow: not decided
            return {"fate": "escapes", "at": unresolved}
        return {"fate": "dropped", "at": {**here, "line": fn.node.end_lineno}}

    def _up(
        self, fn: Func, caller: Func, call: ast.Call, names: set, returned: bool, mode: str, up: int
    ) -> dict | None:
        """Continue a walk in a caller, after the call, with the batch it passed or got back."""
        if mode not in self.allowed(caller, call):
            return None
        bound: set[str] = set()
        for p in set(fn.params) & names:
            arg = Program.argument(call, fn, p)
            if isinstance(arg, ast.Name):
                bound.add(arg.id)
        if returned:
            for n in caller.nodes:
                if isinstance(n, ast.Assign) and any(c is call for c in ast.walk(n.value)):
                    bound |= {t.id for t in n.targets if isinstance(t, ast.Name)}
                    bound |= {
                        e.id for t in n.targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)
                    }
        bound -= {"self", "cls"}
        if not bound:
            return None
        start = call.lineno + 1 if call.end_lineno is None else call.end_lineno + 1
        return self.follow(caller, start, bound, mode, 0, up + 1, self.br(caller).conds.get(id(call), ()))

    def _callers(self, fn: Func) -> list[tuple[Func, ast.Call]]:
        return [(g, c) for g, c, f in self.edges if f is fn][:24]

    @staticmethod
    def _params_for(call: ast.Call, callee: Func, names: set[str]) -> set[str]:
        out = set()
        for k in call.keywords:
            if k.arg and _is(k.value, names):
                out.add(k.arg)
        params = callee.params
        for i, a in enumerate(a for a in call.args if not isinstance(a, ast.Starred)):
            if _is(a, names) and i < len(params):
                out.add(params[i])
        return out

    def install_paths(self, fn: Func, line: int, batch: str | None, mode: str) -> dict:
        """Where an install's batch goes in `mode`, its fate; {"fate", "path" | "at"}."""
        if batch is None:
            node = next((n for n in fn.nodes if getattr(n, "lineno", None) == line and isinstance(n, ast.Assign)), None)
            batch = next((t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)), None)
        if batch is None:
            return {"fate": "escapes", "at": {"function": fn.qualname, "file": fn.file, "line": line}}
        node = next((n for n in fn.nodes if isinstance(n, ast.stmt) and getattr(n, "lineno", None) == line), None)
        base = self.br(fn).conds.get(id(node), ()) if node is not None else ()
        return self.follow(fn, line, {batch}, mode, base=base)
