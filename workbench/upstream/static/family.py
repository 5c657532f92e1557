"""The idle-batch family beyond the missing attribute: a field None or empty on an IDLE batch, dereferenced.

Three kinds, each its own `kind` in a finding and its own key prefix:

- `none-deref`: an attention backend (`layers/attention/`, walked from `init_forward_metadata` as the
  contract lint walks it) dereferences `spec_info.<attr>` where the spec input installed in IDLE
  holds None or an empty tensor for `<attr>`;
- `batch-none-deref`: the same for `forward_batch.<attr>`, None or empty on the IDLE `ForwardBatch`;
- `runner-none-deref`: either of those in a runner file (`model_executor/**/*runner*.py`, the
  speculative draft runners), walked from every method that takes a `forward_batch`.

What is None or empty on IDLE is read from the release's own sources: a spec input's
`create_idle_input` (a keyword given None, an `x if c else None`, or an empty tensor:
`torch.empty((0, ...))`, `torch.full((0, ...), ...)`, `torch.zeros(0)`), the dataclass fields it
leaves at a default None (and `__init__`/`__post_init__` do not set); for `ForwardBatch`, the
dataclass fields with default None that `ForwardBatch.init_new` sets neither in `cls(...)` nor
under a branch an IDLE batch can take, the fields it sets to an empty tensor in such a branch, and
the `ScheduleBatch.prepare_for_idle` fields set to an empty tensor that `init_new` passes through
by name, directly or through a local assigned once (`seq_lens_cpu = batch.seq_lens_cpu`; empty on
the unpadded IDLE batch only: the DP padding refills them). A field `init_new` sets
None under IDLE is not None when the DP padding (`prepare_mlp_sync_batch`) sets it again on every path
an IDLE batch takes (`_padding_sets`).

After the padding, the last `self.<field> = ...` an IDLE batch can take on the DP padding path
(`prepare_mlp_sync_batch`, with the `ForwardBatch` methods it calls on `self`, `_pad_inputs_to_size`,
walked in place) gives the field's value when it is None or an empty tensor: the padded batch is
the one the metadata gets, so that value wins over `init_new`'s.

A dereference is `.x` (an attribute or method of the value), an index, `len()` / `max()` / `min()` /
`sum()` / `iter()` / `range()` ..., iteration, arithmetic, an ordering comparison, a torch
constructor's size (`torch.empty(n)`), the first argument of another torch function
(`torch.cumsum(x, dim=0)`) or an argument of a Triton launch (`kernel[grid](x, ...)`), of the read,
of a local bound to it (`a, b = spec_info.a, spec_info.b`), or of the parameter of a same-file
callee the read is handed to (`passed`). On a None value every one raises; on an empty tensor only
those that need an element do (`.max()` / `.min()` / `.item()` with no dimension, `max()` / `min()`,
a constant index). It is guarded when the same function tests the value for None (`is None`, `is not
None`, its truth, also as `getattr(spec_info, "a", None)`) at or before that line (an empty value only
by `.numel()` / `len()`: an empty tensor passes `is not None`), when the branch it is in excludes IDLE,
when every path to it needs a None test the IDLE batch fails (`dead_on_idle`: a field tested not None
that is None on IDLE for that class, such as the `else` of `if getattr(spec_info, "kv_indptr", None) is
None`, a local bound there keeping that branch's facts; or `spec_info` tested not None in a callee whose
`spec_info` parameter the caller left at its default None), or when the walk from the same entry assigns
that attribute of `spec_info` / `forward_batch` anywhere (as the contract lint treats a backend's own writes: the
multi-step draft backends set `spec_info.kv_indptr` before each step).

An IDLE batch a worker builds by hand (`ForwardBatch(forward_mode=ForwardMode.IDLE, ...)`, DSpark's
`run_idle_participation`) leaves the fields it does not give at their default None
(`hand_built_idle_values`); a read in a model executor runner file outside a capture function (in
`model_runner.py`, in a method `ModelRunner.forward` reaches) also sees those values (`runner-none-deref`).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import replace

from ..sources.trees import SourceTree
from .lint import ATTN_DIR, MODES_FILE, RUNNER_DIR, SPEC_DIR, _reaches, analyse, backend_name
from .modes import ForwardModes, mode_names, parse_forward_modes, predicate_call
from .program import parse
from .reads import ENTRY, Ctx, FileScanner, is_spec

KINDS = ("none-deref", "batch-none-deref", "runner-none-deref")
SCHEDULE_FILE = "sglang/srt/managers/schedule_batch.py"
BATCH_CLASS = "ForwardBatch"
_EMPTY_CTORS = ("empty", "zeros", "ones", "full", "tensor", "randn", "arange")
_REDUCE = ("max", "min", "item", "amax", "amin", "argmax", "argmin")
_BUILTIN_DEREF = (
    "len",
    "max",
    "min",
    "sum",
    "iter",
    "list",
    "tuple",
    "sorted",
    "enumerate",
    "zip",
    "int",
    "float",
    "range",
)
# torch constructors whose size argument raises on None (`torch.empty(None)`: TypeError)
_SIZE_CTORS = ("empty", "zeros", "ones", "full", "rand", "randn", "arange")
# torch functions whose first argument may be None (any other `torch.f(x, ...)` raises on a None x)
_NONE_OK = ("is_tensor", "is_storage")


# a None fact in a path's constraints (`Ctx.only`): (NONE_FACT, key, is None); key `SPEC` is the spec
# input itself, ("spec" | "batch", attribute) a field of it or of the forward batch
NONE_FACT = "none"
SPEC = ("spec", "")


def _spec_params_default_none(fn: ast.FunctionDef, method: bool) -> list[str]:
    """The parameters of `fn` named as a spec input (`is_spec`) whose default is None."""
    a = fn.args
    pos = [*a.posonlyargs, *a.args][1 if method else 0 :]
    defaults = dict(zip([x.arg for x in pos][len(pos) - len(a.defaults) :], a.defaults, strict=True))
    defaults.update({x.arg: d for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None})
    return [p for p, d in defaults.items() if _is_none(d) and is_spec(ast.Name(id=p))]


def dead_on_idle(only: list, values: dict[str, dict], spec_values: dict[str, dict] | None) -> bool:
    """Whether a path's None facts (`NONE_FACT` in its constraints) cannot hold on the IDLE batch: two
    that contradict (`spec_info is None` where a caller left it None, then its `else`), or a field the
    path needs not None that is None on IDLE (`values`: the forward batch's, `spec_values`: the spec
    input's, each {attr: {state, ...}})."""
    facts = {(o[1], o[2]) for o in only if o[0] == NONE_FACT}
    if any((key, not v) in facts for key, v in facts):
        return True
    for (recv, attr), is_none in facts:
        vals = values if recv == "batch" else (spec_values or {})
        if attr and not is_none and (vals.get(attr) or {}).get("state") == "None":
            return True
    return False


def is_batch(node: ast.expr) -> bool:
    """`forward_batch`, `fb`, or `<x>.forward_batch`."""
    if isinstance(node, ast.Name):
        return node.id in ("forward_batch", "fb")
    return isinstance(node, ast.Attribute) and node.attr == "forward_batch"


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _zero_dim(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == 0
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        return isinstance(node.elts[0], ast.Constant) and node.elts[0].value == 0
    return False


def _empty_tensor(node: ast.expr) -> bool:
    """`torch.empty((0, ...))`, `torch.full((0,), v)`, `torch.zeros(0)`, `torch.tensor([])`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr not in _EMPTY_CTORS or not node.args:
        return False
    first = node.args[0]
    if node.func.attr == "tensor":
        return isinstance(first, ast.List) and not first.elts
    return _zero_dim(first)


def _state(value: ast.expr) -> str | None:
    """ "None", "empty", "None or empty" or None (a value)."""
    if _is_none(value):
        return "None"
    if _empty_tensor(value):
        return "empty"
    if isinstance(value, ast.IfExp):
        states = {_state(value.body), _state(value.orelse)}
        if "None" in states:
            return "None"
        if "empty" in states:
            return "empty"
    return None


def _classes(sources: dict[str, str]) -> dict[str, tuple[str, ast.ClassDef]]:
    out: dict[str, tuple[str, ast.ClassDef]] = {}
    for fname, text in sorted(sources.items()):
        try:
            tree = ast.parse(text, filename=fname)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, (fname, node))
    return out


def _fields_none(cls: ast.ClassDef) -> dict[str, int]:
    """Annotated fields with default None, minus those `__init__`/`__post_init__` assign."""
    out = {
        s.target.id: s.lineno
        for s in cls.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None and _is_none(s.value)
    }
    for s in cls.body:
        if isinstance(s, ast.FunctionDef) and s.name in ("__init__", "__post_init__"):
            for n in ast.walk(s):
                if (
                    isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Store)
                    and getattr(n.value, "id", "") == "self"
                ):
                    out.pop(n.attr, None)
    return out


def spec_idle_values(spec_sources: dict[str, str], spec_classes: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """{spec class: {attr: {state, how, file, line}}} for each class with a `create_idle_input`."""
    defs = _classes(spec_sources)
    out: dict[str, dict[str, dict]] = {}
    for cname, info in spec_classes.items():
        chain = [c for c in info["mro"] if c in defs]
        factory = next(
            (
                (defs[c][0], m)
                for c in chain
                for m in defs[c][1].body
                if isinstance(m, ast.FunctionDef) and m.name == "create_idle_input"
            ),
            None,
        )
        if factory is None:
            continue
        ffile, func = factory
        call = next(
            (
                r.value
                for r in ast.walk(func)
                if isinstance(r, ast.Return)
                and isinstance(r.value, ast.Call)
                and isinstance(r.value.func, ast.Name)
                and r.value.func.id in ("cls", cname)
            ),
            None,
        )
        if call is None or any(k.arg is None for k in call.keywords):
            continue  # built another way (positional, **kwargs): not read
        given = {k.arg: k.value for k in call.keywords}
        vals: dict[str, dict] = {}
        for k, v in given.items():
            st = _state(v)
            if st:
                vals[k] = {"state": st, "how": f"{k}={ast.unparse(v)[:60]} in create_idle_input", "file": ffile}
                vals[k]["line"] = v.lineno
        defaults: dict[str, tuple[str, int]] = {}
        for c in reversed(chain):
            fname, node = defs[c]
            for a in list(defaults):
                if any(isinstance(s, ast.AnnAssign) and getattr(s.target, "id", "") == a for s in node.body):
                    defaults.pop(a)
            defaults.update({a: (fname, line) for a, line in _fields_none(node).items()})
        for a, (fname, line) in defaults.items():
            if a not in given and not call.args:
                vals[a] = {
                    "state": "None",
                    "how": "dataclass default None, not given by create_idle_input",
                    "file": fname,
                }
                vals[a]["line"] = line
        if vals:
            out[cname] = vals
    return out


def _walk_modes(body: list[ast.stmt], fm: ForwardModes | None, modes: frozenset | None, visit) -> None:
    """Call visit(stmt, modes) for every statement, `modes` narrowed by forward-mode `if` tests."""
    for stmt in body:
        visit(stmt, modes)
        if isinstance(stmt, ast.If):
            pred = predicate_call(stmt.test)
            neg = isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not)
            if neg:
                pred = predicate_call(stmt.test.operand)
            acc = fm.accepts(*pred) if (pred and fm) else None
            if acc is not None:
                t = frozenset(acc) if not neg else frozenset(fm.members) - acc
                f = frozenset(fm.members) - t
                _walk_modes(stmt.body, fm, t if modes is None else modes & t, visit)
                _walk_modes(stmt.orelse, fm, f if modes is None else modes & f, visit)
            else:
                _walk_modes(stmt.body, fm, modes, visit)
                _walk_modes(stmt.orelse, fm, modes, visit)
        else:
            for name in ("body", "orelse", "finalbody"):
                block = getattr(stmt, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    _walk_modes(block, fm, modes, visit)
            for h in getattr(stmt, "handlers", []):
                _walk_modes(h.body, fm, modes, visit)


def batch_idle_values(tree: SourceTree, fm: ForwardModes | None) -> dict[str, dict]:
    """{attr: {state, how, file, line}} of the IDLE `ForwardBatch` (see the module docstring)."""
    text = tree.get(MODES_FILE)
    if not text or fm is None:
        return {}
    cls = _classes({MODES_FILE: text}).get(BATCH_CLASS)
    if cls is None:
        return {}
    node = cls[1]
    none_fields = _fields_none(node)
    for m in node.body:  # a field a ForwardBatch method sets (prepare_mlp_sync_batch ...) may be set later
        if isinstance(m, ast.FunctionDef) and m.name != "init_new":
            for n in ast.walk(m):
                if (
                    isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Store)
                    and getattr(n.value, "id", "") == "self"
                ):
                    none_fields.pop(n.attr, None)
    init = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "init_new"), None)
    if init is None:
        return {}
    built = next(
        (
            n
            for n in ast.walk(init)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "cls" and n.keywords
        ),
        None,
    )
    given = _through_locals(init, {k.arg: k.value for k in (built.keywords if built else []) if k.arg})
    set_idle: dict[str, ast.expr] = {}

    def visit(stmt: ast.stmt, modes: frozenset | None) -> None:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return
        if modes is not None and "IDLE" not in modes:
            return
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(e, ast.Attribute) and getattr(e.value, "id", "") == "ret":
                    set_idle[e.attr] = stmt.value if not isinstance(t, ast.Tuple) else ast.Constant(value=...)

    _walk_modes(init.body, fm, None, visit)
    out: dict[str, dict] = {}
    for a, line in none_fields.items():
        if a not in given and a not in set_idle:
            out[a] = {"state": "None", "how": "dataclass default None, not set by init_new in IDLE", "line": line}
    schedule_empty = _idle_schedule_empty(tree)
    empty_before_padding = {a for a in schedule_empty if isinstance(given.get(a), ast.Attribute)}
    refilled = _padding_sets(node, fm, empty_before_padding)
    for a, v in set_idle.items():
        st = _state(v) if v is not None else None
        if st == "None" and a in refilled:
            continue  # the DP padding sets it again on every IDLE path before the metadata runs
        if st:
            out[a] = {"state": st, "how": f"ret.{a} = {ast.unparse(v)[:60]} in init_new under IDLE", "line": v.lineno}
    for a, line in schedule_empty.items():
        v = given.get(a)
        if a not in out and isinstance(v, ast.Attribute) and v.attr == a and a not in set_idle:
            out[a] = {
                "state": "empty",
                "how": f"ScheduleBatch.prepare_for_idle sets it empty (unpadded IDLE), passed as {a}={ast.unparse(v)}",
                "file": SCHEDULE_FILE,
                "line": line,
            }
    for a, (v, func) in _padded_values(node, fm).items():
        st = _state(v)
        if st:  # the padded batch is the one the metadata gets: its value wins over init_new's
            out[a] = {
                "state": st,
                "how": f"self.{a} = {ast.unparse(v)[:60]} in ForwardBatch.{func} under IDLE (after the DP padding)",
                "line": v.lineno,
            }
    for v in out.values():
        v.setdefault("file", MODES_FILE)
    return out


def _through_locals(func: ast.FunctionDef, given: dict[str, ast.expr]) -> dict[str, ast.expr]:
    """`given` with each keyword value that is a local of `func` assigned exactly once replaced by the
    value assigned (`seq_lens_cpu = batch.seq_lens_cpu` ... `cls(seq_lens_cpu=seq_lens_cpu)`: the field
    is passed through from the schedule batch)."""
    bound: dict[str, list[ast.expr]] = {}
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Name):
                        bound.setdefault(e.id, []).append(n.value if e is t else ast.Constant(value=...))
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name):
            bound.setdefault(n.target.id, []).extend([ast.Constant(value=...)] * 2)
    out = dict(given)
    for k, v in given.items():
        if isinstance(v, ast.Name) and len(bound.get(v.id, [])) == 1:
            out[k] = bound[v.id][0]
    return out


def _padded_values(cls: ast.ClassDef, fm: ForwardModes) -> dict[str, tuple[ast.expr, str]]:
    """{field: (value, method)} of the last `self.<field> = value` an IDLE batch can take on the DP
    padding path: `prepare_mlp_sync_batch` with the `ForwardBatch` methods it calls on `self`
    (`_pad_inputs_to_size`) walked in place, in statement order."""
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    last: dict[str, tuple[ast.expr, str]] = {}

    def walk(func: ast.FunctionDef, stack: tuple[str, ...], modes: frozenset | None) -> None:
        def visit(stmt: ast.stmt, inner: frozenset | None) -> None:
            if inner is not None and "IDLE" not in inner:
                return
            call = getattr(stmt, "value", None) if isinstance(stmt, (ast.Expr, ast.Assign)) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and getattr(call.func.value, "id", "") == "self"
                and call.func.attr in methods
                and call.func.attr not in stack
            ):
                walk(methods[call.func.attr], (*stack, call.func.attr), inner)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                        if isinstance(e, ast.Attribute) and getattr(e.value, "id", "") == "self":
                            value = stmt.value if not isinstance(t, ast.Tuple) else ast.Constant(value=...)
                            last[e.attr] = (value, func.name)

        _walk_modes(func.body, fm, modes, visit)

    if PADDING in methods:
        walk(methods[PADDING], (PADDING,), None)
    return last


PADDING = "prepare_mlp_sync_batch"  # the DP padding: the only path that hands an IDLE batch to the metadata


def _idle_test(test: ast.expr, fm: ForwardModes, empty: set[str]) -> bool | None:
    """Whether a test holds on an IDLE batch before its padding: a forward-mode predicate (and / or /
    not of them), or `self.<f>.shape[0] == 0` / `len(self.<f>) == 0` / `self.<f>.numel() == 0` of a
    field empty on that batch; None when it depends on anything else."""
    if isinstance(test, ast.BoolOp):
        parts = [_idle_test(v, fm, empty) for v in test.values]
        decisive = isinstance(test.op, ast.Or)  # an Or is decided by a true part, an And by a false one
        if decisive in parts:
            return decisive
        return (not decisive) if all(p is not None for p in parts) else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _idle_test(test.operand, fm, empty)
        return None if inner is None else not inner
    pred = predicate_call(test)
    if pred is not None:
        acc = fm.accepts(*pred)
        return None if acc is None else "IDLE" in acc
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == 0
    ):
        size = test.left
        field = None
        if isinstance(size, ast.Subscript) and isinstance(size.value, ast.Attribute) and size.value.attr == "shape":
            field = size.value.value
        elif isinstance(size, ast.Call) and getattr(size.func, "id", None) == "len" and size.args:
            field = size.args[0]
        elif isinstance(size, ast.Call) and getattr(size.func, "attr", None) == "numel":
            field = size.func.value
        if isinstance(field, ast.Attribute) and getattr(field.value, "id", "") == "self" and field.attr in empty:
            return isinstance(test.ops[0], ast.Eq)
    return None


_ALL = frozenset({"*"})  # a path that raises or relabels the batch: no IDLE batch reaches the metadata on it


def _leaves_idle(value: ast.expr) -> bool:
    """`ForwardMode.X` with X not IDLE (`self.forward_mode = ForwardMode.EXTEND`: the batch is no longer IDLE)."""
    names = mode_names(value)
    return bool(names) and "IDLE" not in names


def _must_set(body: list[ast.stmt], fm: ForwardModes, empty: set[str]) -> frozenset:
    """The `self.<f>` fields every path of `body` an IDLE batch takes assigns (a path that raises, or
    that relabels the batch to another forward mode, counts as assigning all: it hands no IDLE batch to
    the metadata; a return ends the path)."""
    done: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.Raise):
            return _ALL
        if isinstance(stmt, ast.Return):
            return frozenset(done)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Attribute) and getattr(e.value, "id", "") == "self":
                        if e.attr == "forward_mode" and stmt.value is not None and _leaves_idle(stmt.value):
                            return _ALL
                        done.add(e.attr)
        elif isinstance(stmt, ast.If):
            holds = _idle_test(stmt.test, fm, empty)
            yes = _must_set(stmt.body, fm, empty) if holds is not False else _ALL
            no = _must_set(stmt.orelse, fm, empty) if holds is not True else _ALL
            both = yes & no if _ALL not in (yes, no) else (no if yes == _ALL else yes)
            if both == _ALL:
                return _ALL
            done |= both
        elif isinstance(stmt, (ast.With, ast.Try)):
            inner = _must_set(stmt.body, fm, empty)
            if inner == _ALL:
                return _ALL
            done |= inner
    return frozenset(done)


def _padding_sets(cls: ast.ClassDef, fm: ForwardModes, empty: set[str]) -> set[str]:
    """The fields `ForwardBatch.prepare_mlp_sync_batch` (the DP padding) sets on every path an IDLE
    batch takes (`empty`: the fields empty on that batch, which decide its `shape[0] == 0` tests)."""
    func = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == PADDING), None)
    got = _must_set(func.body, fm, empty) if func is not None else frozenset()
    return set() if got == _ALL else set(got)


def _idle_schedule_empty(tree: SourceTree) -> dict[str, int]:
    text = tree.get(SCHEDULE_FILE)
    if not text:
        return {}
    cls = _classes({SCHEDULE_FILE: text}).get("ScheduleBatch")
    func = (
        next((m for m in cls[1].body if isinstance(m, ast.FunctionDef) and m.name == "prepare_for_idle"), None)
        if cls
        else None
    )
    out: dict[str, int] = {}
    for n in ast.walk(func) if func else []:
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            if isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self" and _empty_tensor(n.value):
                out[t.attr] = n.lineno
    return out


def _is_idle_mode(value: ast.expr) -> bool:
    """`ForwardMode.IDLE`."""
    return mode_names(value) == {"IDLE"}


def _sets_on(func: ast.FunctionDef, name: str) -> set[str]:
    """The `<name>.<field>` attributes `func` assigns."""
    out: set[str] = set()
    for n in ast.walk(func):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and getattr(n.value, "id", "") == name:
            out.add(n.attr)
    return out


def hand_built_idle_values(tree: SourceTree) -> dict[str, dict]:
    """{field: {state, how, file, line}}: the `ForwardBatch` fields an IDLE batch a worker or runner
    builds by hand (`ForwardBatch(forward_mode=ForwardMode.IDLE, ...)` in `speculative/` or
    `model_executor/`, DSpark's `run_idle_participation`) leaves None: given the literal None, or left at
    their dataclass default None (not given to the constructor); either way not assigned on the variable
    in that function, nor on the parameter it is handed to in a method of the same class the function
    calls (`self._fill_dp_moe_sync_metadata(idle_batch, ...)`). Only the first such batch that leaves a
    field None is named for it."""
    text = tree.get(MODES_FILE)
    cls = _classes({MODES_FILE: text}).get(BATCH_CLASS) if text else None
    if cls is None:
        return {}
    defaults = _fields_none(cls[1])
    out: dict[str, dict] = {}
    for fname, src in sorted({**tree.under(SPEC_DIR), **tree.under(RUNNER_DIR)}.items()):
        module = parse(fname, src)  # cached by content: the oracle runs this on every mutant's tree
        if module is None:
            continue  # reported by the scan of the covered files
        for owner in [n for n in ast.walk(module) if isinstance(n, ast.ClassDef)]:
            methods = {m.name: m for m in owner.body if isinstance(m, ast.FunctionDef)}
            for func in methods.values():
                for stmt in ast.walk(func):
                    call = stmt.value if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
                    if not (
                        isinstance(call, ast.Call)
                        and getattr(call.func, "id", None) == BATCH_CLASS
                        and isinstance(stmt.targets[0], ast.Name)
                        and any(k.arg == "forward_mode" and _is_idle_mode(k.value) for k in call.keywords)
                    ) or any(k.arg is None for k in call.keywords):
                        continue
                    var = stmt.targets[0].id
                    nones = {k.arg: k.value.lineno for k in call.keywords if _is_none(k.value)}
                    given = {k.arg for k in call.keywords if k.arg not in nones} | _sets_on(func, var)
                    for c in ast.walk(func):  # a same-class helper handed the batch, setting it on its parameter
                        if (
                            isinstance(c, ast.Call)
                            and isinstance(c.func, ast.Attribute)
                            and getattr(c.func.value, "id", "") == "self"
                            and c.func.attr in methods
                        ):
                            helper = methods[c.func.attr]
                            params = [a.arg for a in helper.args.args][1:]
                            for param, arg in zip(params, c.args, strict=False):
                                if getattr(arg, "id", None) == var:
                                    given |= _sets_on(helper, param)
                    for field, line in nones.items():
                        if field not in given and field not in out:
                            out[field] = {
                                "state": "None",
                                "how": f"given None by the IDLE ForwardBatch(...) {owner.name}.{func.name} "
                                f"builds ({fname.rsplit('/', 1)[-1]}:{line})",
                                "file": fname,
                                "line": line,
                            }
                    for field, line in defaults.items():
                        if field not in given and field not in nones and field not in out:
                            out[field] = {
                                "state": "None",
                                "how": f"left at its dataclass default None by the IDLE ForwardBatch(...) "
                                f"{owner.name}.{func.name} builds ({fname.rsplit('/', 1)[-1]}:{call.lineno})",
                                "file": MODES_FILE,
                                "line": line,
                            }
    return out


MODEL_RUNNER_FILE = "sglang/srt/model_executor/model_runner.py"


def forward_reach(tree: SourceTree) -> set[str]:
    """`ModelRunner.<method>` for every method `ModelRunner.forward` reaches through `self.<method>(...)`
    calls (forward included); empty when the release has no such class."""
    text = tree.get(MODEL_RUNNER_FILE)
    cls = _classes({MODEL_RUNNER_FILE: text}).get("ModelRunner") if text else None
    if cls is None:
        return set()
    methods = {m.name: m for m in cls[1].body if isinstance(m, ast.FunctionDef)}
    seen, todo = set(), ["forward"] if "forward" in methods else []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for n in ast.walk(methods[name]):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and getattr(n.func.value, "id", "") == "self"
                and n.func.attr in methods
            ):
                todo.append(n.func.attr)
    return {f"ModelRunner.{m}" for m in seen}


def _gets_hand_built(fname: str, function: str, runner: bool, reach: set[str]) -> bool:
    """Whether a read may see an IDLE batch a worker builds by hand (and hands to a model runner's
    `forward`): one in a model executor runner file, in `model_runner.py` only in a method
    `ModelRunner.forward` reaches (`reach`), not in a capture function (a capture builds its own
    batch), not in a speculative draft runner (a worker drives those with its own batches)."""
    if not (runner and fname.startswith(RUNNER_DIR)) or "capture" in function:
        return False
    return fname != MODEL_RUNNER_FILE or function.split(".<locals>")[0] in reach


def _empty_guarded(d: dict, checked: dict[tuple, int]) -> bool:
    """Whether a dereference is guarded against an empty value: only a size test (`.numel()`, `len()`)
    at or before its line does; a None test does not (an empty tensor passes `is not None`)."""
    return checked.get((d["recv"], d["attr"], "empty"), 10**9) <= d["line"]


class DerefScanner(FileScanner):
    """A `FileScanner` that also records dereferences of `spec_info.X` / `forward_batch.X` values."""

    def __init__(self, fname: str, source: str, modes: ForwardModes | None):
        super().__init__(fname, source, modes)
        self.derefs: list[dict] = []
        self._batch_writes: set[str] = set()
        self._alias: dict[str, dict[str, tuple]] = {}
        self._checked: dict[str, dict[tuple, int]] = {}  # where -> {(recv, attr, "none"|"empty"): first line}

    def scan_method(self, cname: str, name: str) -> list[dict]:
        """Dereferences reachable from `cname.name`."""
        self.derefs, self._seen, self.writes, self._batch_writes = [], set(), set(), set()
        self._func(cname, self.methods[cname][name], Ctx(), cname)
        for d in self.derefs:
            d["empty_guarded"] = _empty_guarded(d, self._checked.get(d["function"], {}))
            if d["attr"] in (self.writes if d["recv"] == "spec" else self._batch_writes):
                d.update(none_guarded=True, empty_guarded=True, guard="written by the walk before use")
        return self.derefs

    def _target(self, node: ast.AST, ctx: Ctx, where: str) -> tuple | None:
        """(receiver, attribute, read line, passed as) of a read, of a local bound to one, or of a
        parameter the caller handed one to (`passed as`: where, else None)."""
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            if is_spec(node.value, ctx.aliases):
                return ("spec", node.attr, node.lineno, None)
            if is_batch(node.value) and node.attr != "spec_info":
                return ("batch", node.attr, node.lineno, None)
        if isinstance(node, ast.Name):
            local = self._alias.get(where, {})
            if node.id in local:
                return local[node.id]
            return dict(ctx.bound).get(node.id)
        return None

    def _enter(self, call: ast.Call, target: ast.FunctionDef, owner: str | None, ctx: Ctx, where: str) -> None:
        """Walk a callee with each of its parameters the caller hands a read to bound to that read
        (a None passed on is dereferenced where the callee uses it); the caller's bindings stay behind."""
        a = target.args
        params = [x.arg for x in [*a.posonlyargs, *a.args]]
        if owner is not None and params[:1] in (["self"], ["cls"]):
            params = params[1:]
        passed = [(p, v) for p, v in zip(params, call.args, strict=False) if not isinstance(v, ast.Starred)]
        kwonly = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
        passed += [(k.arg, k.value) for k in call.keywords if k.arg in kwonly]
        name = f"{owner}.{target.name}" if owner else target.name
        bound = []
        for param, value in passed:
            t = self._target(value, ctx, where)
            if t is not None and self._checked.get(where, {}).get((t[0], t[1], "none"), 10**9) > call.lineno:
                via = f"passed as {param} to {name} at {self.fname.rsplit('/', 1)[-1]}:{call.lineno}"
                bound.append((param, (t[0], t[1], t[2], t[3] or via, *t[4:])))
        self._alias.pop(name, None)
        only = ctx.only
        if any(p not in {q for q, _ in passed} for p in _spec_params_default_none(target, owner is not None)) and not (
            any(isinstance(v, ast.Starred) for v in call.args) or any(k.arg is None for k in call.keywords)
        ):
            # the callee's spec input is its parameter's default None: the caller's facts about its own
            # spec input do not hold for it
            only = tuple(o for o in only if not (o[0] == NONE_FACT and o[1][0] == "spec")) + ((NONE_FACT, SPEC, True),)
        self._func(owner, target, replace(ctx, bound=frozenset(bound), only=only), owner or "")

    def _check(self, t: tuple | None, what: str, line: int, where: str) -> None:
        if t is not None:
            self._checked.setdefault(where, {}).setdefault((t[0], t[1], what), line)

    def _tested(self, node: ast.expr, ctx: Ctx, where: str) -> tuple | None:
        """What a None test tests: a read (`_target`), or `getattr(<spec or batch>, "a", None)`, the
        read of `a` with a None default."""
        t = self._target(node, ctx, where)
        if t is not None or not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            return t
        args = node.args
        if (
            node.func.id == "getattr"
            and len(args) == 3
            and isinstance(args[1], ast.Constant)
            and isinstance(args[1].value, str)
            and _is_none(args[2])
        ):
            if is_spec(args[0], ctx.aliases):
                return ("spec", args[1].value, node.lineno, None)
            if is_batch(args[0]):
                return ("batch", args[1].value, node.lineno, None)
        return None

    @staticmethod
    def _none_kind(node: ast.expr) -> str:
        """`none` for a test of the read itself; `none-getattr` for one of its `getattr(..., None)`,
        which guards a None but not an empty value (an empty tensor passes `is not None`)."""
        return "none-getattr" if isinstance(node, ast.Call) else "none"

    def _none_key(self, node: ast.expr, ctx: Ctx, where: str) -> tuple | None:
        """The key of a None fact about `node`: `SPEC` for the spec input itself, (receiver, attribute)
        for a read or its `getattr(..., None)`."""
        if isinstance(node, ast.Name) and is_spec(node, ctx.aliases):
            return SPEC
        t = self._tested(node, ctx, where)
        return None if t is None else (t[0], t[1])

    def _truth(self, test: ast.expr, ctx: Ctx, where: str) -> None:
        for part in test.values if isinstance(test, ast.BoolOp) else [test]:
            inner = part.operand if isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not) else part
            self._check(self._tested(inner, ctx, where), self._none_kind(inner), inner.lineno, where)

    def _stmt(self, stmt: ast.stmt, ctx: Ctx, cname: str | None, where: str) -> Ctx:
        if isinstance(stmt, (ast.If, ast.While, ast.Assert)):
            self._truth(stmt.test, ctx, where)
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Attribute) and is_batch(e.value):
                        self._batch_writes.add(e.attr)
        if isinstance(stmt, ast.For):
            self._deref(self._target(stmt.iter, ctx, where), "iteration", stmt.iter.lineno, False, ctx, where)
        out = super()._stmt(stmt, ctx, cname, where)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            tgt, val = stmt.targets[0], stmt.value
            pairs = (
                list(zip(tgt.elts, val.elts, strict=False))
                if isinstance(tgt, ast.Tuple) and isinstance(val, ast.Tuple)
                else [(tgt, val)]
            )
            for name, v in pairs:
                if isinstance(name, ast.Name):
                    found = self._target(v, ctx, where)
                    local = self._alias.setdefault(where, {})
                    if found is not None:  # the None facts where it was bound hold wherever it is used
                        facts = tuple(o for o in ctx.only if o[0] == NONE_FACT)
                        found = (*found[:4], tuple(dict.fromkeys((*found[4:5][0], *facts))) if found[4:] else facts)
                    local[name.id] = found  # None: rebound to another value (a parameter's binding too)
        return out

    def _expr(self, node: ast.expr, ctx: Ctx, cname: str | None, where: str):
        self._note(node, ctx, where)
        facts = super()._expr(node, ctx, cname, where)
        # None facts of a test (`NONE_FACT`): `x is None` / `is not None` / `== None` / `!= None`, and a
        # truth test (`if x:`: not None where it holds)
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
            and _is_none(node.comparators[0])
        ):
            key = self._none_key(node.left, ctx, where)
            if key is not None:
                is_none = isinstance(node.ops[0], (ast.Is, ast.Eq))
                facts.true_only.append((NONE_FACT, key, is_none))
                facts.false_only.append((NONE_FACT, key, not is_none))
        elif isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
            key = self._none_key(node, ctx, where)
            if key is not None:
                facts.true_only.append((NONE_FACT, key, False))
        return facts

    def _note(self, node: ast.expr, ctx: Ctx, where: str) -> None:  # noqa: C901
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            if all(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in node.ops) and any(
                _is_none(c) for c in node.comparators
            ):
                self._check(self._tested(node.left, ctx, where), self._none_kind(node.left), line, where)
                return
            if any(isinstance(op, (ast.Lt, ast.Gt, ast.LtE, ast.GtE)) for op in node.ops):
                for side in [node.left, *node.comparators]:
                    self._deref(self._target(side, ctx, where), "comparison", line, False, ctx, where)
        elif isinstance(node, ast.IfExp):
            self._truth(node.test, ctx, where)
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                t = self._target(f.value, ctx, where)
                if t is not None and f.attr == "numel":
                    self._check(t, "empty", line, where)
                empty = f.attr == "item" or (f.attr in _REDUCE and not node.args and not node.keywords)
                self._deref(t, f".{f.attr}()", line, empty, ctx, where)
                if f.attr in _SIZE_CTORS and getattr(f.value, "id", None) == "torch":
                    size = node.args[:1] or [k.value for k in node.keywords if k.arg in ("size", "end")]
                    for arg in size:
                        for part in arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]:
                            self._deref(
                                self._target(part, ctx, where), f"torch.{f.attr}() size", line, False, ctx, where
                            )
                if getattr(f.value, "id", None) == "torch" and f.attr not in _SIZE_CTORS + _NONE_OK and node.args:
                    t = self._target(node.args[0], ctx, where)
                    self._deref(t, f"torch.{f.attr}() input", line, False, ctx, where)
            elif isinstance(f, ast.Subscript):  # a Triton launch, `kernel[grid](...)`: each argument a pointer
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    self._deref(self._target(arg, ctx, where), "Triton kernel argument", line, False, ctx, where)
            elif isinstance(f, ast.Name) and f.id in _BUILTIN_DEREF and node.args:
                t = self._target(node.args[0], ctx, where)
                if t is not None and f.id == "len":
                    self._check(t, "empty", line, where)
                self._deref(t, f"{f.id}()", line, f.id in ("max", "min") and len(node.args) == 1, ctx, where)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            self._deref(self._target(node.value, ctx, where), f".{node.attr}", line, False, ctx, where)
        elif isinstance(node, ast.Subscript):
            s = node.slice
            const = isinstance(s, ast.Constant) or (isinstance(s, ast.UnaryOp) and isinstance(s.operand, ast.Constant))
            self._deref(self._target(node.value, ctx, where), "[...]", line, const, ctx, where)
        elif isinstance(node, ast.BinOp):
            for side in (node.left, node.right):
                self._deref(self._target(side, ctx, where), "arithmetic", line, False, ctx, where)

    def _deref(self, t: tuple | None, op: str, line: int, empty: bool, ctx: Ctx, where: str) -> None:
        if t is None:
            return
        checked = self._checked.get(where, {})
        only = ctx.only + tuple(o for o in (t[4] if len(t) > 4 else ()) if o not in ctx.only)
        self.derefs.append(
            {
                "file": self.fname,
                "recv": t[0],
                "attr": t[1],
                "read_line": t[2],
                "line": line,
                "op": op,
                "crashes_on_empty": empty,
                "none_guarded": min(
                    checked.get((t[0], t[1], "none"), 10**9), checked.get((t[0], t[1], "none-getattr"), 10**9)
                )
                <= line,
                "empty_guarded": min(
                    checked.get((t[0], t[1], "none"), 10**9), checked.get((t[0], t[1], "empty"), 10**9)
                )
                <= line,
                "function": where,
                "passed": t[3],
                "code": self.lines[line - 1].strip() if 0 < line <= len(self.lines) else "",
                "modes": None if ctx.modes is None else sorted(ctx.modes),
                "only": [list(o) for o in only],
            }
        )


def _crashes(d: dict, state: str) -> bool:
    if state == "None":
        return not d["none_guarded"]
    return d["crashes_on_empty"] and not d["empty_guarded"]


def runner_files(tree: SourceTree) -> dict[str, str]:
    """The runner files: `model_executor/**/*runner*.py` and the speculative draft runners."""
    return {
        p: t for p, t in {**tree.under(RUNNER_DIR), **tree.under(SPEC_DIR)}.items() if "runner" in p.rsplit("/", 1)[-1]
    }


def _scan_file(
    fname: str, text: str, fm: ForwardModes | None, runner: bool
) -> tuple[dict[str, list[dict]], str | None]:
    try:
        sc = DerefScanner(fname, text, fm)
    except SyntaxError as exc:
        return {}, f"{fname}: {exc.msg} (line {exc.lineno})"
    out: dict[str, list[dict]] = {}
    for cname, methods in sc.methods.items():
        names = (
            [n for n, m in methods.items() if "forward_batch" in [a.arg for a in m.args.args]]
            if runner
            else ([ENTRY] if ENTRY in methods else [])
        )
        derefs: dict[tuple, dict] = {}
        for n in names:
            for d in sc.scan_method(cname, n):
                key = (d["line"], d["recv"], d["attr"], d["function"])
                old = derefs.get(key)
                if old is None:
                    derefs[key] = {**d, "entry": f"{cname}.{n}", "paths": [d["only"]]}
                else:
                    old["paths"].append(d["only"])
                    old["none_guarded"] &= d["none_guarded"]
                    old["empty_guarded"] &= d["empty_guarded"]
                    old["crashes_on_empty"] |= d["crashes_on_empty"]
                    if old["modes"] is not None:
                        old["modes"] = None if d["modes"] is None else sorted(set(old["modes"]) | set(d["modes"]))
        if derefs:
            out[cname] = sorted(derefs.values(), key=lambda d: (d["line"], d["attr"]))
    return out, None


_SCANNED: dict[tuple, tuple[dict[str, list[dict]], str | None]] = {}


def _scan_cached(
    fname: str, text: str, fm: ForwardModes | None, runner: bool
) -> tuple[dict[str, list[dict]], str | None]:
    """`_scan_file`, memoised by the file's content and the forward modes' members and predicates
    (a mutated tree rescans only the files it changes: the oracle lints hundreds of them)."""
    modes = (
        None if fm is None else (tuple(fm.members), fm.enum, tuple((k, ast.dump(v)) for k, v in fm.predicates.items()))
    )
    key = (fname, hashlib.sha1(text.encode("utf-8", "replace")).hexdigest(), modes, runner)
    if key not in _SCANNED:
        if len(_SCANNED) > 4000:
            _SCANNED.pop(next(iter(_SCANNED)))
        _SCANNED[key] = _scan_file(fname, text, fm, runner)
    return _SCANNED[key]


def family_key(f: dict) -> str:
    """`kind|backend|mode|class|attribute|function` (the kind first, so no key collides with the lint's)."""
    return f"{f['kind']}|{f['backend']}|{f['mode']}|{f['spec_class']}|{f['attr']}|{f['read_function']}"


def analyse_family(tree: SourceTree, base: dict | None = None) -> dict:
    """The family findings of one source tree; `base` is the contract lint's `analyse(tree, paths=False)`."""
    base = base or analyse(tree, paths=False)
    modes_src = tree.get(MODES_FILE)
    fm = parse_forward_modes(modes_src) if modes_src else None
    classes = base["spec_inputs"]
    spec_vals = spec_idle_values(tree.under(SPEC_DIR), classes)
    idle_installed = {i["class"] for i in base["installs"] if "IDLE" in i["modes"]}
    batch_vals = batch_idle_values(tree, fm)
    hand_vals = hand_built_idle_values(tree)
    reach = forward_reach(tree) if hand_vals else set()
    unparsed: list[str] = []
    findings: dict[tuple, dict] = {}
    scopes = [(p, t, False) for p, t in sorted(tree.under(ATTN_DIR).items())]
    scopes += [(p, t, True) for p, t in sorted(runner_files(tree).items())]
    for fname, text, runner in scopes:
        per_class, err = _scan_cached(fname, text, fm, runner)
        if err:
            unparsed.append(err)
        for bcls, derefs in per_class.items():
            for d in derefs:
                if d["modes"] is not None and "IDLE" not in d["modes"]:
                    continue
                if d["recv"] == "batch":
                    val = batch_vals.get(d["attr"])
                    if val is None and _gets_hand_built(fname, d["function"], runner, reach):
                        val = hand_vals.get(d["attr"])
                    targets = [(BATCH_CLASS, val, None)]
                else:
                    targets = [
                        (c, spec_vals[c].get(d["attr"]), classes[c])
                        for c in sorted(spec_vals)
                        if c in idle_installed and _reaches(d, classes[c])
                    ]
                for cname, val, _ in targets:
                    if val is None or not _crashes(d, val["state"]):
                        continue
                    if all(dead_on_idle(p, batch_vals, spec_vals.get(cname)) for p in d["paths"]):
                        continue  # every path to it needs a None test the IDLE batch fails
                    kind = (
                        "runner-none-deref"
                        if runner
                        else ("batch-none-deref" if d["recv"] == "batch" else "none-deref")
                    )
                    f = {
                        "kind": kind,
                        "source": tree.label,
                        "release": tree.release,
                        "backend": backend_name(fname),
                        "backend_class": bcls,
                        "backend_file": fname,
                        "entry": d["entry"],
                        "mode": "IDLE",
                        "spec_class": cname,
                        "spec_class_file": classes[cname]["file"] if cname in classes else MODES_FILE,
                        "receiver": "spec_info" if d["recv"] == "spec" else "forward_batch",
                        "attr": d["attr"],
                        "idle_value": val["state"],
                        "idle_value_how": f"{val['how']} ({val['file']}:{val['line']})",
                        "read_file": fname,
                        "read_line": d["read_line"],
                        "read_function": d["function"],
                        "passed": d["passed"],
                        "deref_line": d["line"],
                        "deref_op": d["op"],
                        "deref_code": d["code"],
                        "verdict": None,
                        "verdict_reason": None,
                        "verdict_by": None,
                    }
                    f["key"] = family_key(f)
                    findings.setdefault((f["key"], d["line"]), f)
    return {
        "source": tree.label,
        "release": tree.release,
        "spec_idle_values": {c: v for c, v in spec_vals.items() if c in idle_installed},
        "spec_classes_files": {c: classes[c]["file"] for c in spec_vals},
        "batch_idle_values": batch_vals,
        "hand_built_idle_values": hand_vals,
        "unparsed": unparsed,
        "findings": sorted(
            findings.values(), key=lambda f: (f["kind"], f["read_file"], f["deref_line"], f["spec_class"])
        ),
    }


def count_by_kind(findings: list[dict]) -> dict[str, int]:
    """{kind: number of findings} over every kind (0 included)."""
    return {k: sum(1 for f in findings if f["kind"] == k) for k in KINDS}


def format_family(findings: list[dict]) -> str:
    """One line per finding."""
    if not findings:
        return "no family findings"
    rows = [
        (
            f["kind"],
            f["backend"],
            f["spec_class"],
            f"{f['receiver']}.{f['attr']} ({f['idle_value']})",
            f"{f['read_file'].rsplit('/', 1)[-1]}:{f['deref_line']} {f['deref_op']}",
            f["read_function"],
            f.get("verdict") or "",
        )
        for f in findings
    ]
    head = ("kind", "file", "class", "field (on IDLE)", "dereference", "function", "verdict")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows])


__all__ = ["KINDS", "analyse_family", "batch_idle_values", "count_by_kind", "family_key", "format_family"]
