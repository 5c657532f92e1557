"""Oracle mutants: drawn from the independent read sites (`sites.py`), not from the lint's analysis.

Every spec-input / forward-batch read site in the covered folders is put in one of four kinds:

- `missing-attribute`: a `spec_info` site in `layers/attention/`; mutants: the field removed from a
  spec input that has it (unguarded site), or the guard removed (a `getattr` default / `hasattr`
  site) for a spec input that lacks the attribute;
- `none-deref`: an unguarded `spec_info` site in `layers/attention/`; mutant: the field left None by
  the class's own `create_idle_input` (its keyword set to, or given, `None`; a field that constructor
  leaves at its dataclass default None is None already: no mutant, `idle_default_none`);
- `batch-none-deref`: a `forward_batch` site in `layers/attention/`; mutant: `ForwardBatch.init_new`
  leaves the field None on an IDLE batch (`ret.<field> = None` in its IDLE branch). The replay driver
  builds its batch by hand (`wb_driver/batches.py`), not through `init_new`, so the case asks it to
  leave the same field None where `init_new` returns (before the DP padding); a field the driver's
  batch never sets (`DRIVER_BATCH_FIELDS`) is None in the control too, so its mutant is not run;
- `runner-none-deref`: a `forward_batch` site in a runner file of `model_executor/` or `speculative/`
  (a name containing `runner`), the same mutant. Only the runner file of the idle runner path the
  driver runs (`IDLE_RUNNER_FILES`: `EagerRunner._execute_idle`, before 0.5.14
  `ModelRunner.forward_idle`) is replayed (the triton backend on the padded IDLE batch). In
  `decode_cuda_graph_runner.py` a field also has a graph-runner mutant: DSpark's hand-built draft IDLE
  batch (`run_idle_participation`'s `ForwardBatch(...)`) giving it None, replayed by the graph-runner
  scenario (`GRAPH_SCENARIO`, the capture stood in); the other runner files (the other CUDA-graph
  runners) run only on CUDA, in the real runtime.

Sites in other files of `model_executor/` and `speculative/` (workers, `forward_batch_info.py`, the
spec inputs themselves) are counted as `outside`, with why.

A built mutant carries the replay cases that judge it: for every backend class of the site's file
(a class defining `init_forward_metadata`; the single-step class for a `*MultiStep*` one, which the
driver cannot build from the runner alone), the spec class, on the batches of its role that the
release itself builds, each by a syntactic rule of its own, apart from the lint's install scan:
`IDLE padded` when the class defines `create_idle_input` and the release calls
`<class>.create_idle_input` (`idle_called`); `TARGET_VERIFY` for a `*Verify*` class, `DRAFT_EXTEND`
(else `DRAFT_EXTEND_V2`) for another `*Draft*` class, when a function of `speculative/` sets that
forward mode and names the class or a base of it (`role_evidence`), watching the site lines. The
classes and where a field is defined come from `classes.py` (the field's definition must be found
to remove it); the sites, the backends and the cases do not ask the analyser.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from dataclasses import dataclass, field

from ..sources.trees import SourceTree
from .classes import collect, spec_input_classes
from .lint import MODES_FILE, SPEC_DIR, backend_name
from .modes import parse_forward_modes
from .mutate import MutationError, remove_guard, segment, splice
from .recall import _removal
from .sites import enumerate_sites

ATTN = "sglang/srt/layers/attention/"
SRT_DIR = "sglang/srt/"
KINDS = ("missing-attribute", "none-deref", "batch-none-deref", "runner-none-deref")
REAL = frozenset({"triton", "torch_native"})
GPU_STUBS = ("aiter", "flashinfer", "sgl_kernel", "torch.ops.sgl_kernel", "wave_lang")
# The ForwardBatch fields the replay driver's hand-built batch sets (wb_driver/batches.py make_batch,
# before the DP padding): every other field is None in the control already.
DRIVER_BATCH_FIELDS = frozenset(
    {
        "forward_mode",
        "batch_size",
        "req_pool_indices",
        "seq_lens",
        "seq_lens_sum",
        "seq_lens_cpu",
        "spec_info",
        "capture_hidden_mode",
        "input_ids",
        "positions",
        "out_cache_loc",
    }
)
# the kinds whose runnable mutants edit only ForwardBatch.init_new, so the oracle runs them all in one
# replay process (`replay/oracle.py` shares_process): sampled SHARED_FACTOR times as many
SHARED_KINDS = ("batch-none-deref", "runner-none-deref")
SHARED_FACTOR = 4
PAD_FUNCTION = "_pad_inputs_to_size"  # ForwardBatch's DP padding (the release's own, run by the driver)
IDLE_RUNNER_FILES = ("sglang/srt/model_executor/runner/eager_runner.py", "sglang/srt/model_executor/model_runner.py")
IDLE_BACKEND = ("sglang/srt/layers/attention/triton_backend.py", "TritonAttnBackend")
BATCH_REASON = (
    "the replay driver's hand-built ForwardBatch never sets this field (DRIVER_BATCH_FIELDS): it is None "
    "in the control too, so leaving it None changes nothing the driver runs"
)
RUNNER_REASON = (
    "runner-only path: the replay driver runs an attention backend's init_forward_metadata and the idle "
    "runner path (IDLE_RUNNER_FILES), not this file; its methods (CUDA-graph capture and replay) run only "
    "on CUDA, in the real runtime"
)
SPEC_RUNNER_REASON = (
    "a spec_info read in a runner file: the driver's idle runner path hands the spec input through unread; not built"
)
_FIELD_HOWS = ("field", "field with default")
# the graph-runner replay (`replay/runner_decisions.py`, `wb_driver/graph_runner.py`): the release's
# DecodeCudaGraphRunner, built by its real constructor with a STAND-IN for the capture, asked
# `can_run_graph` (then its `load_batch` when True) by the draft IDLE batch DSpark's
# `DraftBlockProposer.run_idle_participation` builds by hand on an idle DP rank
GRAPH_RUNNER_FILE = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
DSPARK_FILE = "sglang/srt/speculative/dspark_components/dspark_draft.py"
GRAPH_SCENARIO = "dspark-idle"
GRAPH_CONTROL_KEY = f"{GRAPH_SCENARIO}|control"
GRAPH_STAND_IN = "STAND-IN: DecodeCudaGraphRunner.capture (the real __init__ ran; no CUDA graph captured or replayed)"
# the kinds whose replay counts as a refutation only where a site line ran, with the None or on the
# release (`replay/oracle.py` judge_case); the rule is part of their digest, so an outcome judged by
# the older rule (a site's function entered was enough) is not served from the cache
SITE_LINE_KINDS = ("none-deref", "runner-none-deref")
SITE_LINE_RULE = "clean needs a site line run, by the mutant or by the release"


@dataclass
class SiteMutant:
    """One oracle mutant: its kind, operator, the sites it exposes, its edit and the cases that judge it."""

    kind: str
    op: str
    name: str
    attr: str
    spec_class: str | None
    sites: list[dict]
    changes: dict[str, str] = field(default_factory=dict)
    cases: list[dict] = field(default_factory=list)
    undecided: str | None = None  # why the oracle cannot run it (no cases)

    def digest(self) -> str:
        """A hash of the edit and the cases: the cache key's second half."""
        h = hashlib.sha256()
        for p in sorted(self.changes):
            h.update(p.encode() + b"\0" + self.changes[p].encode() + b"\0")
        h.update(repr([(c["key"], c["watch"]) for c in self.cases]).encode())
        if self.kind in SITE_LINE_KINDS:
            h.update(SITE_LINE_RULE.encode())
        return h.hexdigest()[:16]


def classify_site(site: dict) -> str:
    """The kind of a site (`KINDS`), or `outside` for a non-runner file of model_executor/ or speculative/."""
    f = site["file"]
    if f.startswith(ATTN):
        return "missing-attribute" if site["receiver"] == "spec_info" else "batch-none-deref"
    return "runner-none-deref" if "runner" in f.rsplit("/", 1)[-1] else "outside"


@functools.lru_cache(maxsize=512)
def backend_classes(text: str, path: str) -> list[str]:
    """Classes of one file that define `init_forward_metadata` (what the driver can run); memoised
    (a file is asked once per site group and mutant)."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return []
    return [
        n.name
        for n in tree.body
        if isinstance(n, ast.ClassDef)
        and any(isinstance(b, ast.FunctionDef) and b.name == "init_forward_metadata" for b in n.body)
    ]


def defines(text: str, path: str, cls: str, method: str) -> bool:
    """Whether class `cls` of the file defines `method` in its own body."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return False
    return any(
        isinstance(n, ast.ClassDef)
        and n.name == cls
        and any(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name == method for b in n.body)
        for n in tree.body
    )


ROLE_MODES = ("TARGET_VERIFY", "DRAFT_EXTEND", "DRAFT_EXTEND_V2")


def _named(fn: ast.AST, owner: str | None) -> set[str]:
    """Class names a function names: its parameters' annotations, `C(...)` / `C.f(...)` calls,
    `isinstance(x, C)`, and its own class (`self`)."""
    out = {owner} if owner else set()
    args = getattr(fn, "args", None)
    for a in [*(args.posonlyargs if args else []), *(args.args if args else []), *(args.kwonlyargs if args else [])]:
        for n in ast.walk(a.annotation) if a.annotation is not None else []:
            if isinstance(n, ast.Name):
                out.add(n.id)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                out.add(n.value.strip("'\""))
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name):
                out.add(f.id)
                if f.id == "isinstance" and len(n.args) == 2:
                    t = n.args[1]
                    out |= {e.id for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if isinstance(e, ast.Name)}
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                out.add(f.value.id)
    return out


def _modes_set(fn: ast.AST) -> set[str]:
    """`ForwardMode.X` members a function assigns: `<x>.forward_mode = ...` or a `forward_mode=` keyword."""
    values: list[ast.expr] = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "forward_mode" for t in n.targets
        ):
            values.append(n.value)
        elif isinstance(n, ast.Call):
            values += [k.value for k in n.keywords if k.arg == "forward_mode"]
    return {
        n.attr
        for v in values
        for n in ast.walk(v)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "ForwardMode"
    }


def role_evidence(spec: dict[str, str]) -> dict[str, set[str]]:
    """{mode of ROLE_MODES: class names} read from the release's speculative/ sources by one syntactic
    rule, apart from the lint's install scan: a function (CUDA-graph runner files left out: capture
    builds its own inputs) that assigns `ForwardMode.<mode>` and names the class (`_named`)."""
    out: dict[str, set[str]] = {m: set() for m in ROLE_MODES}
    for path, text in sorted(spec.items()):
        if "cuda_graph" in path.rsplit("/", 1)[-1]:
            continue
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError:
            continue
        funcs: list[tuple[ast.AST, str | None]] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node, None))
            elif isinstance(node, ast.ClassDef):
                funcs += [(b, node.name) for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for fn, owner in funcs:
            modes = _modes_set(fn) & set(ROLE_MODES)
            if modes:
                names = _named(fn, owner)
                for m in modes:
                    out[m] |= names
    return out


def idle_called(tree: SourceTree) -> set[str]:
    """Names `X` of every `X.create_idle_input(...)` call in the release's `sglang/srt/` sources: the
    spec inputs whose idle constructor the release runs (a class that defines one nobody calls, such as
    0.5.23's `UnoDraftInput`, whose worker refuses idle batches, never reaches an IDLE batch by it)."""
    out: set[str] = set()
    for path, text in sorted(tree.under(SRT_DIR).items()):
        if "create_idle_input" not in text:
            continue
        try:
            module = ast.parse(text, filename=path)
        except SyntaxError:
            continue
        for n in ast.walk(module):
            f = n.func if isinstance(n, ast.Call) else None
            if isinstance(f, ast.Attribute) and f.attr == "create_idle_input" and isinstance(f.value, ast.Name):
                out.add(f.value.id)
    return out


def batch_kinds(
    cname: str,
    has_idle: bool,
    members: list[str],
    mro: list[str] | None = None,
    roles: dict[str, set[str]] | None = None,
) -> list[tuple[str, str]]:
    """(mode, batch kind) a spec class is replayed on: `IDLE padded` when it has `create_idle_input`;
    `TARGET_VERIFY` for a `*Verify*` class, the draft-extend mode the release has (`DRAFT_EXTEND`, else
    `DRAFT_EXTEND_V2`, among its ForwardMode `members`) for another `*Draft*` class, each only where
    `roles` (`role_evidence`) shows a release function setting that mode and naming the class or a
    base of it (`mro`); `roles` None keeps the role by name alone."""
    out = [("IDLE", "IDLE padded")] if has_idle else []
    if "Verify" in cname:
        mode: str | None = "TARGET_VERIFY"
    elif "Draft" in cname:
        mode = next((m for m in ("DRAFT_EXTEND", "DRAFT_EXTEND_V2") if m in members), None)
    else:
        mode = None
    if mode and (roles is None or {cname, *(mro or [])} & roles.get(mode, set())):
        out.append((mode, mode))
    return out


def is_dataclass_field(spec: dict[str, str], cinfo: dict, attr: str) -> bool:
    """Whether `attr` is a field of a `@dataclass` class that defines it (a constructor keyword);
    an annotated default on a plain class (`SpecInput`) is not."""
    info = cinfo["attrs"].get(attr) or {}
    if info.get("how") not in _FIELD_HOWS or info.get("file") not in spec:
        return False
    try:
        tree = ast.parse(spec[info["file"]], filename=info["file"])
    except SyntaxError:
        return False
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == info.get("class")), None)
    return node is not None and any("dataclass" in ast.unparse(d) for d in node.decorator_list)


def batch_fields(text: str, path: str) -> tuple[set[str], set[str]]:
    """(the annotated fields of `ForwardBatch`, those `ForwardBatch.init_new` sets: a `cls(...)`
    keyword or a `ret.<field> = ...`)."""
    tree = ast.parse(text, filename=path)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ForwardBatch"), None)
    if node is None:
        return set(), set()
    fields = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    init = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "init_new"), None)
    sets: set[str] = set()
    for n in ast.walk(init) if init else []:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "cls":
            sets.update(k.arg for k in n.keywords if k.arg)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and getattr(n.value, "id", "") == "ret":
            sets.add(n.attr)
    return fields, sets & fields


@functools.lru_cache(maxsize=256)
def set_batch_idle_none(text: str, path: str, attr: str) -> str:
    """`ForwardBatch.init_new` with `ret.<attr> = None` on an IDLE batch: in its `if
    ret.forward_mode.is_idle():` block before that block's `return ret`, else such a block added
    before its last `return ret`."""
    tree = ast.parse(text, filename=path)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ForwardBatch"), None)
    init = None if node is None else next((b for b in node.body if getattr(b, "name", None) == "init_new"), None)
    if init is None:
        raise MutationError(f"{path}: ForwardBatch defines no init_new")
    lines = text.splitlines(keepends=True)
    for n in ast.walk(init):
        if (
            isinstance(n, ast.If)
            and "forward_mode.is_idle()" in ast.unparse(n.test)
            and not ast.unparse(n.test).startswith("not ")
            and isinstance(n.body[-1], ast.Return)
        ):
            ret = n.body[-1]
            indent = lines[ret.lineno - 1][: ret.col_offset]
            lines.insert(ret.lineno - 1, f"{indent}ret.{attr} = None\n")
            return "".join(lines)
    rets = [
        r for r in ast.walk(init) if isinstance(r, ast.Return) and isinstance(r.value, ast.Name) and r.value.id == "ret"
    ]
    if not rets:
        raise MutationError(f"{path}: ForwardBatch.init_new has no `return ret`")
    ret = max(rets, key=lambda r: r.lineno)
    indent = lines[ret.lineno - 1][: ret.col_offset]
    lines.insert(ret.lineno - 1, f"{indent}if ret.forward_mode.is_idle():\n{indent}    ret.{attr} = None\n")
    return "".join(lines)


def _pad_function(tree: ast.Module) -> ast.FunctionDef | None:
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ForwardBatch"), None)
    return None if node is None else next((b for b in node.body if getattr(b, "name", None) == PAD_FUNCTION), None)


def padded_fields(text: str, path: str) -> set[str]:
    """The fields `ForwardBatch._pad_inputs_to_size` (the DP padding) pads whatever they hold: a
    `self.<field> = ...` with no `self.<field> is not None` test in the function. Left None before the
    padding, such a field raises in the padding itself; after it, the backends read it."""
    fn = _pad_function(ast.parse(text, filename=path))
    if fn is None:
        return set()
    stored, tested = set(), set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and getattr(n.value, "id", "") == "self":
            stored.add(n.attr)
        elif isinstance(n, ast.Compare) and any(isinstance(o, ast.IsNot) for o in n.ops):
            left = n.left
            if isinstance(left, ast.Attribute) and getattr(left.value, "id", "") == "self":
                tested.add(left.attr)
    return stored - tested


@functools.lru_cache(maxsize=256)
def set_padded_none(text: str, path: str, attr: str) -> str:
    """`ForwardBatch._pad_inputs_to_size` ending with `self.<attr> = None` on an IDLE batch (an
    `if self.forward_mode.is_idle():` block after its last statement): the padding hands the
    backends an idle batch without that field."""
    fn = _pad_function(ast.parse(text, filename=path))
    if fn is None:
        raise MutationError(f"{path}: ForwardBatch defines no {PAD_FUNCTION}")
    last = fn.body[-1]
    if isinstance(last, ast.Return):
        raise MutationError(f"{path}: {PAD_FUNCTION} ends with a return")
    lines = text.splitlines(keepends=True)
    indent = lines[fn.body[0].lineno - 1][: fn.body[0].col_offset]
    at = last.end_lineno
    lines.insert(at, f"{indent}if self.forward_mode.is_idle():\n{indent}    self.{attr} = None\n")
    return "".join(lines)


@functools.lru_cache(maxsize=256)
def _class_nodes(text: str, path: str) -> dict[str, ast.ClassDef]:
    """The top-level classes of one file by name (memoised: asked once per site group and class)."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return {}
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def idle_default_none(spec: dict[str, str], cinfo: dict, attr: str, own: dict[str, dict]) -> bool:
    """Whether `attr` is a dataclass field declared with the default None (`x: T = None`, its nearest
    declaration along the class's MRO) that no `__init__` / `__post_init__` of the MRO assigns (`own`:
    `classes.collect`, where each class is): a `create_idle_input` that does not give it leaves it None."""
    info = cinfo["attrs"].get(attr) or {}
    if info.get("how") != "field with default" or info.get("file") not in spec:
        return False
    node = _class_nodes(spec[info["file"]], info["file"]).get(info["class"])
    decl = next(
        (
            s
            for s in (node.body if node else [])
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == attr
        ),
        None,
    )
    if decl is None or not (isinstance(decl.value, ast.Constant) and decl.value.value is None):
        return False
    for name in cinfo.get("mro") or [info["class"]]:
        fname = (own.get(name) or {}).get("file")
        body = _class_nodes(spec[fname], fname)[name].body if fname in spec else []
        for fn in body:
            if isinstance(fn, ast.FunctionDef) and fn.name in ("__init__", "__post_init__"):
                for n in ast.walk(fn):
                    if (
                        isinstance(n, ast.Attribute)
                        and isinstance(n.ctx, ast.Store)
                        and n.attr == attr
                        and getattr(n.value, "id", "") == "self"
                    ):
                        return False
    return True


def set_idle_none(text: str, path: str, cls: str, attr: str, is_field: bool, default_none: bool = False) -> str:
    """`cls.create_idle_input` with `attr=None` in the object it returns (the keyword replaced or added).
    `default_none` (`idle_default_none`): a return that does not give `attr` leaves it None already, so
    it is not edited; when no return gives it, the mutant would be the release itself (refused)."""
    tree = ast.parse(text, filename=path)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    fn = None if node is None else next((b for b in node.body if getattr(b, "name", None) == "create_idle_input"), None)
    if fn is None:
        raise MutationError(f"{path}: {cls} defines no create_idle_input")
    calls = [
        r.value
        for r in ast.walk(fn)
        if isinstance(r, ast.Return)
        and isinstance(r.value, ast.Call)
        and isinstance(r.value.func, ast.Name)
        and r.value.func.id in ("cls", cls)
    ]
    if not calls:
        raise MutationError(f"{path}: {cls}.create_idle_input returns no cls(...) call")
    edits = []
    for call in calls:
        kw = next((k for k in call.keywords if k.arg == attr), None)
        if kw is not None:
            if isinstance(kw.value, ast.Constant) and kw.value.value is None:
                raise MutationError(f"{cls}.create_idle_input already gives {attr}=None")
            edits.append((kw.value, "None"))
            continue
        if not is_field:
            raise MutationError(f"{cls}.{attr} is not a dataclass field the constructor takes")
        if default_none:
            continue
        s = segment(text, call).rstrip()
        if not s.endswith(")"):
            raise MutationError(f"{path}:{call.lineno}: cannot edit the call")
        head = s[:-1].rstrip()
        sep = "" if head.endswith("(") else (" " if head.endswith(",") else ", ")
        edits.append((call, f"{head}{sep}{attr}=None)"))
    if not edits:
        raise MutationError(
            f"{cls}.create_idle_input leaves {attr} at its dataclass default None: None on IDLE already "
            "(an equivalent mutant; the release's own None is judged by `workbench upstream family --replay`)"
        )
    return splice(text, edits)


def _case(site_file: str, bcls: str, cname: str, cfile: str, mode: str, kind: str, watch: list[str]) -> dict:
    backend = backend_name(site_file)
    traced = backend not in REAL
    return {
        "key": f"{site_file}:{bcls}|{kind}|{cname}",
        "stand_in": traced,  # GPU library calls answered by CPU stand-ins (in_release/stubs.py), listed
        "backend_module": site_file[:-3].replace("/", "."),
        "backend_class": bcls,
        "backend": backend,
        "mode": mode,
        "batch": kind,
        "spec_module": cfile[:-3].replace("/", "."),
        "spec_class": cname,
        "trace": traced,
        "stub": list(GPU_STUBS) if traced else [],
        "model": "mla" if "mla" in backend else ("mamba" if backend in ("hybrid_linear_attn", "mamba") else "mha"),
        "watch": sorted(set(watch)),
        "answer_missing": False,
        "timeout_s": 60,
    }


def _cases(
    tree: SourceTree,
    site_file: str,
    sites: list[dict],
    cname: str,
    cinfo: dict,
    has_idle: bool,
    members: list[str],
    roles: dict[str, set[str]] | None = None,
) -> list[dict]:
    text = tree.files[site_file]
    # a multi-step draft backend takes (runner, topk, steps) and runs one single-step backend per
    # step: the driver builds backends from the runner alone, so the single-step class stands for it
    classes = [c for c in backend_classes(text, site_file) if "MultiStep" not in c]
    own = sorted({s["function"].split(".", 1)[0] for s in sites} & set(classes))
    watch = [f"{s['file']}:{s['line']}" for s in sites]
    return [
        _case(site_file, b, cname, cinfo["file"], mode, kind, watch)
        for b in (own or classes[:1])
        for mode, kind in batch_kinds(cname, has_idle, members, cinfo.get("mro"), roles)
    ]


def _for_class(
    tree: SourceTree,
    spec: dict[str, str],
    fname: str,
    attr: str,
    guarded: bool,
    group: list[dict],
    cname: str,
    cinfo: dict,
    has_idle: bool,
    skipped: dict[str, str],
    own: dict[str, dict],
) -> list[SiteMutant]:
    """The mutants of one (file, attribute, guarded) site group for one spec class (`own`: the
    spec sources' classes, `classes.collect`)."""
    short = fname.rsplit("/", 1)[-1]
    has = attr in cinfo["attrs"]
    out: list[SiteMutant] = []
    if guarded and not has:
        name = f"{short} {attr}: guard removed, {cname} lacks it"
        try:
            text = tree.files[fname]
            for s in group:
                text = remove_guard(text, fname, s["line"], attr)
            out.append(SiteMutant("missing-attribute", "guard removed", name, attr, cname, group, {fname: text}))
        except MutationError as exc:
            skipped[name] = str(exc)
    elif not guarded and has:
        name = f"{short} {attr}: removed from {cname}"
        try:
            changes = _removal(tree, cname, attr, {}, own)
            out.append(SiteMutant("missing-attribute", "field removed", name, attr, cname, group, changes))
        except MutationError as exc:
            skipped[name] = str(exc)
        if has_idle:
            name = f"{short} {attr}: None from {cname}.create_idle_input"
            path = cinfo["file"]
            try:
                edited = set_idle_none(
                    spec[path],
                    path,
                    cname,
                    attr,
                    is_dataclass_field(spec, cinfo, attr),
                    idle_default_none(spec, cinfo, attr, own),
                )
                out.append(SiteMutant("none-deref", "idle None", name, attr, cname, group, {path: edited}))
            except MutationError as exc:
                skipped[name] = str(exc)
    return out


def build_mutants(tree: SourceTree) -> dict:
    """Every oracle mutant of one tree: {sites, mutants, skipped (name: why), unparsed}."""
    found = enumerate_sites(tree)
    sites = found["sites"]
    spec = tree.under(SPEC_DIR)
    classes = spec_input_classes(spec)
    modes_src = tree.get(MODES_FILE)
    fm = parse_forward_modes(modes_src) if modes_src else None
    members = fm.members if fm else []
    idle = {c: defines(spec[i["file"]], i["file"], c, "create_idle_input") for c, i in classes.items()}
    own = collect(spec)
    roles = role_evidence(spec)
    called = idle_called(tree)
    mutants: list[SiteMutant] = []
    skipped: dict[str, str] = {}
    by_kind: dict[str, list[dict]] = {}
    for s in sites:
        by_kind.setdefault(classify_site(s), []).append(s)
    attn_spec = by_kind.get("missing-attribute", [])
    groups: dict[tuple[str, str, bool], list[dict]] = {}
    for s in attn_spec:
        groups.setdefault((s["file"], s["attr"], bool(s["guard"])), []).append(s)
    for (fname, attr, guarded), group in sorted(groups.items()):
        if not backend_classes(tree.files[fname], fname):
            why = "no class of this file defines init_forward_metadata: the driver has no entry to run"
        else:
            why = None
        for cname, cinfo in sorted(classes.items()):
            if cinfo["dynamic"]:
                continue
            made = _for_class(tree, spec, fname, attr, guarded, group, cname, cinfo, idle[cname], skipped, own)
            for m in made:
                if why:
                    m.undecided = why
                else:
                    m.cases = _cases(tree, fname, group, cname, cinfo, idle[cname] and cname in called, members, roles)
                    if not m.cases:
                        m.undecided = (
                            f"{cname}: no batch of its role that the release builds "
                            "(role_evidence, idle_called) and the driver can build"
                        )
            mutants += made
    mutants += _batch_mutants(tree, by_kind, classes, idle, skipped)
    return {
        "sites": {
            **{k: len(by_kind.get(k, [])) for k in (*KINDS, "outside")},
            "none-deref": sum(1 for s in attn_spec if s["guard"] is None),
        },
        "outside_reason": RUNNER_REASON,
        "mutants": mutants,
        "skipped": skipped,
        "unparsed": found["unparsed"],
    }


def _dspark_idle_call(text: str, path: str) -> tuple[ast.Call, set[str]] | None:
    """The `ForwardBatch(...)` call of `run_idle_participation` (DSpark's hand-built draft IDLE batch)
    and the fields set on it again after it: a `<x>.<field> = ...` later in that function or in
    `_fill_dp_moe_sync_metadata`, which fills its DP metadata."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return None
    funcs = {
        b.name: b
        for n in tree.body
        if isinstance(n, ast.ClassDef)
        for b in n.body
        if isinstance(b, ast.FunctionDef) and b.name in ("run_idle_participation", "_fill_dp_moe_sync_metadata")
    }
    run = funcs.get("run_idle_participation")
    call = next(
        (
            n
            for n in ast.walk(run)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "ForwardBatch"
        )
        if run
        else iter(()),
        None,
    )
    if call is None:
        return None
    later: set[str] = set()
    for fn in funcs.values():
        for n in ast.walk(fn):
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Store)
                and getattr(n, "lineno", 0) > (call.end_lineno if fn is run else 0)
            ):
                later.add(n.attr)
    return call, later


def set_dspark_idle_none(text: str, path: str, attr: str) -> str:
    """`run_idle_participation`'s hand-built `ForwardBatch(...)` with `attr=None` (the keyword replaced):
    the draft IDLE batch the graph runner gets without that field."""
    found = _dspark_idle_call(text, path)
    if found is None:
        raise MutationError(f"{path}: no ForwardBatch(...) built in run_idle_participation")
    call, later = found
    kw = next((k for k in call.keywords if k.arg == attr), None)
    if kw is None:
        raise MutationError(
            f"run_idle_participation's ForwardBatch(...) does not give {attr}: its default stands (the release's "
            "own value there is judged by `workbench upstream replay --graph-runner`)"
        )
    if isinstance(kw.value, ast.Constant) and kw.value.value is None:
        raise MutationError(f"run_idle_participation's ForwardBatch(...) already gives {attr}=None")
    if attr in later:
        raise MutationError(
            f"{attr} is set again on the idle batch after ForwardBatch(...) (run_idle_participation or "
            "_fill_dp_moe_sync_metadata): a None there is overwritten (an equivalent mutant)"
        )
    return splice(text, [(kw.value, "None")])


def _graph_mutant(tree: SourceTree, attr: str, group: list[dict], skipped: dict[str, str]) -> SiteMutant | None:
    """The graph-runner mutant of a `decode_cuda_graph_runner.py` field: DSpark's hand-built draft
    IDLE batch leaves it None, judged by the graph-runner replay (`GRAPH_SCENARIO`, one case watching
    the site lines; the release's own run of the scenario is its control, `GRAPH_CONTROL_KEY`)."""
    text = tree.get(DSPARK_FILE)
    name = f"{GRAPH_RUNNER_FILE.rsplit('/', 1)[-1]} {attr}: None from run_idle_participation's ForwardBatch"
    if text is None:
        return None  # no DSpark on this release: no hand-built idle batch for the graph runner
    try:
        changes = {DSPARK_FILE: set_dspark_idle_none(text, DSPARK_FILE, attr)}
    except MutationError as exc:
        skipped[name] = str(exc)
        return None
    case = {
        "graph_runner": True,
        "scenario": GRAPH_SCENARIO,
        "key": f"{GRAPH_SCENARIO}|{name}",
        "control_key": GRAPH_CONTROL_KEY,
        "batch": f"{GRAPH_SCENARIO} (DSpark's draft IDLE batch on an idle DP rank, {GRAPH_STAND_IN})",
        "watch": sorted({f"{s['file']}:{s['line']}" for s in group}),
        "stand_in": True,
        "trace": False,
        "timeout_s": 120,
    }
    return SiteMutant("runner-none-deref", "dspark idle None", name, attr, None, group, changes, [case])


def _idle_spec(classes: dict, idle: dict[str, bool]) -> tuple[str, str] | None:
    """(class, file) of the spec input an IDLE batch carries in the batch mutants' cases:
    `EagleDraftInput` where it has `create_idle_input`, else the first class that has one."""
    have = sorted(c for c, ok in idle.items() if ok and not classes[c]["dynamic"])
    if not have:
        return None
    c = "EagleDraftInput" if "EagleDraftInput" in have else have[0]
    return c, classes[c]["file"]


def _batch_mutants(
    tree: SourceTree, by_kind: dict[str, list[dict]], classes: dict, idle: dict[str, bool], skipped: dict[str, str]
) -> list[SiteMutant]:
    """The `batch-none-deref` and `runner-none-deref` mutants: one per (file, field) of the unguarded
    `forward_batch` sites, `init_new` leaving the field None on an IDLE batch."""
    modes = tree.get(MODES_FILE)
    fields, sets = batch_fields(modes, MODES_FILE) if modes else (set(), set())
    padded = padded_fields(modes, MODES_FILE) if modes else set()
    spec = _idle_spec(classes, idle)
    runner_file = next((f for f in IDLE_RUNNER_FILES if f in tree.files), None)
    out: list[SiteMutant] = []
    for kind in ("batch-none-deref", "runner-none-deref"):
        pairs: dict[tuple[str, str], list[dict]] = {}
        for s in by_kind.get(kind, []):
            if s["guard"] is None and s["receiver"] == "forward_batch":
                pairs.setdefault((s["file"], s["attr"]), []).append(s)
        for (fname, attr), group in sorted(pairs.items()):
            if attr not in fields:
                continue  # a method or property of ForwardBatch, or another object named `batch`
            ops = [("idle None", "None on the IDLE batch (init_new)", set_batch_idle_none)]
            if attr in padded:  # None before the padding raises in the padding: the padding leaving it None too
                ops.append(("padded None", f"None after the DP padding ({PAD_FUNCTION})", set_padded_none))
            for op, what, edit in ops:
                m = _batch_mutant(tree, kind, op, what, edit, fname, attr, group, sets, spec, runner_file, skipped)
                out += [m] if m is not None else []
            if kind == "runner-none-deref" and fname == GRAPH_RUNNER_FILE:
                g = _graph_mutant(tree, attr, group, skipped)
                out += [g] if g is not None else []
        for s in by_kind.get(kind, []):
            if s["receiver"] == "spec_info" and kind == "runner-none-deref":
                skipped.setdefault(f"{s['file'].rsplit('/', 1)[-1]} spec_info.{s['attr']}", SPEC_RUNNER_REASON)
    return out


def _batch_mutant(
    tree: SourceTree,
    kind: str,
    op: str,
    what: str,
    edit,
    fname: str,
    attr: str,
    group: list[dict],
    sets: set[str],
    spec: tuple[str, str] | None,
    runner_file: str | None,
    skipped: dict[str, str],
) -> SiteMutant | None:
    """One forward-batch mutant (`op` "idle None": `init_new` leaves the field None on IDLE; "padded
    None": the DP padding does) with its cases, or None when it is skipped (why in `skipped`)."""
    name = f"{fname.rsplit('/', 1)[-1]} {attr}: {what}"
    if op == "idle None" and attr not in sets:
        skipped[name] = "ForwardBatch.init_new never sets it: None on IDLE already (an equivalent mutant)"
        return None
    try:
        changes = {MODES_FILE: edit(tree.get(MODES_FILE), MODES_FILE, attr)}
    except MutationError as exc:
        skipped[name] = str(exc)
        return None
    m = SiteMutant(kind, op, name, attr, None, group, changes)
    watch = [f"{s['file']}:{s['line']}" for s in group]
    if attr not in DRIVER_BATCH_FIELDS:
        m.undecided = BATCH_REASON
    elif spec is None:
        m.undecided = "no spec input of this release has create_idle_input: no IDLE batch to replay"
    elif kind == "runner-none-deref" and fname != runner_file:
        m.undecided = RUNNER_REASON
    else:
        if kind == "batch-none-deref":
            classes_here = [c for c in backend_classes(tree.files[fname], fname) if "MultiStep" not in c]
            own = sorted({s["function"].split(".", 1)[0] for s in group} & set(classes_here))
            targets = [(fname, b) for b in (own or classes_here[:1])]
        else:
            targets = [IDLE_BACKEND]
        # the driver leaves the field None where the mutated function would: before its own DP
        # padding (`batch_none`, init_new) or after it (`batch_none_after`, the padding)
        where = "batch_none" if op == "idle None" else "batch_none_after"
        for f, b in targets:
            c = _case(f, b, spec[0], spec[1], "IDLE", "IDLE padded", watch)
            # its own key (the cases of every forward-batch mutant share one process), and the
            # key of the release's own run it is judged against
            m.cases.append({**c, "key": f"{c['key']}|{m.name}", "control_key": c["key"], where: [attr]})
        if not m.cases:
            m.undecided = "no class of this file defines init_forward_metadata: the driver has no entry to run"
    return m


def sample(mutants: list[SiteMutant], release: str, per_kind: int | None, real_only: bool = False) -> list[SiteMutant]:
    """The runnable mutants to run: per kind, the first `per_kind` by sha256(release|name) (all when
    None; `SHARED_FACTOR` times as many of the forward-batch kinds, whose mutants share one replay
    process), in rounds (each kind's first, then each kind's second, ...) so that a run stopped early
    has run every kind alike; `real_only`: only mutants whose every case runs a backend on real
    objects (`REAL`), not traced."""
    pools = []
    for kind in KINDS:
        pool = [m for m in mutants if m.kind == kind and m.cases]
        if real_only:
            pool = [m for m in pool if not any(c["trace"] for c in m.cases)]
        pool.sort(key=lambda m: hashlib.sha256(f"{release}|{m.name}".encode()).hexdigest())
        n = None if per_kind is None else per_kind * (SHARED_FACTOR if kind in SHARED_KINDS else 1)
        pools.append(pool[:n])
    return [p[i] for i in range(max(map(len, pools), default=0)) for p in pools if i < len(p)]
