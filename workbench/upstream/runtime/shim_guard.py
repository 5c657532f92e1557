"""The live check that nothing changed the code the crash is about (runs inside the release environment).

Protected modules (``protected``): every module on a crash traceback the real runtime has recorded (the
shipped ``runtime_runs.json``; the workbench passes their names in), and the release's
``speculative/``, ``layers/attention/``, ``layers/dp_attention``, ``model_executor/``, its
scheduler and worker managers and (0.5.23) ``sglang.kernels``. ``check`` holds every loaded
protected module against its own source (``guard_source.SourceModel``): the module's names and
functions, each class's ``__dict__`` entries, bases, methods (``__getattr__`` and
``__getattribute__`` included), literal values and dataclass fields, a dataclass's generated
methods compared with what ``dataclasses.dataclass`` generates from the source's fields. A name the
source does not bind, a function whose code is not the source's (file, first line and bytecode,
through decorators whose wrappers come from the release or its dependencies), a missing method,
changed bases or a module loaded from outside the release is a violation, whoever made it.
Allowed, and listed with what allowed them: the changes a fix the run asked for declares
(``fixed``), and the targets a shim installed in an ``EXEMPT`` module declares (``shimmed``). Listed
and not a violation: a class attribute that a loaded release module's own source sets from outside
(``Class.attr = ...`` after ``from module import Class``: ``release_assigned``, with its line). Not
held: instance attributes, values bound by imports, and classes outside sglang that protected
classes inherit from (``torch.nn.Module``). Under ``TRITON_INTERPRET=1`` (a real-runtime setting) Triton's
interpreter puts its own module's names into the modules whose kernels it runs; a name bound to
that very object of ``triton.runtime.interpreter`` is listed (``interpreter_globals``), not a
violation.
"""

import collections
import dataclasses
import enum
import os
import re
import sys
import sysconfig
import types
from collections.abc import Collection, Iterable

from .guard_source import NO_LITERAL, SourceModel

AREAS = (
    r"^sglang\.srt\.speculative(\.|$)",
    r"^sglang\.srt\.layers\.attention(\.|$)",
    r"^sglang\.srt\.layers\.dp_attention$",
    r"^sglang\.srt\.model_executor(\.|$)",
    r"^sglang\.srt\.managers\.(scheduler[^.]*|schedule_batch|schedule_policy|tp_worker[^.]*|[^.]*_worker)(\.|$)",
    r"^sglang\.srt\.managers\.overlap_utils$",
    r"^sglang\.kernels(\.|$)",
)
# Modules a shim must touch, by name, each with why; only the targets an installed shim declares in
# them are allowed (``shimmed``); the rest of each module is held as any other.
EXEMPT = {
    "sglang.srt.speculative.eagle_utils": "tree-build-triton provides sgl_build_tree_kernel_efficient (imported "
    "only on CUDA/HIP/MUSA) and tree-verify-triton replaces verify_tree_greedy_func (no CPU branch) with "
    "SGLang 0.5.23's Triton versions",
    "sglang.srt.speculative.triton_ops.cache_locs": "extend-cache-locs-cpu: assign_extend_cache_locs_func returns "
    "None on CPU; the shim launches the module's own Triton kernel as the CUDA branch does",
    "sglang.srt.distributed.parallel_state": "cpu-collectives: GroupCoordinator.all_gather_into_tensor / "
    "reduce_scatter_tensor call CUDA-only custom ops; the shim takes the group's own torch.distributed path",
}
_MODULE_MACHINERY = {
    "__name__",
    "__doc__",
    "__package__",
    "__loader__",
    "__spec__",
    "__file__",
    "__cached__",
    "__builtins__",
    "__path__",
    "__annotations__",
    "__warningregistry__",
}
_CLASS_MACHINERY = {
    "__module__",
    "__qualname__",
    "__doc__",
    "__dict__",
    "__weakref__",
    "__annotations__",
    "__orig_bases__",
    "__parameters__",
    "__abstractmethods__",
    "_abc_impl",
    "__static_attributes__",
    "__firstlineno__",
    "__annotate_func__",
    "__annotations_cache__",
    "__type_params__",
    "__protocol_attrs__",
    "_is_protocol",
    "_is_runtime_protocol",
    "__non_callable_proto_members__",
    "__subclasshook__",
    "__init__",  # only as Protocol's generated stand-in (code from the standard library, below)
    "__slotnames__",  # copyreg's cache of a class's slot names
}
_DC_GENERATED = {
    "__init__",
    "__repr__",
    "__eq__",
    "__hash__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__setattr__",
    "__delattr__",
    "__match_args__",
    "__dataclass_fields__",
    "__dataclass_params__",
    "__getstate__",
    "__setstate__",
    "__replace__",
}
_NAMEDTUPLE = {
    "_fields",
    "_field_defaults",
    "__new__",
    "_make",
    "_replace",
    "__repr__",
    "_asdict",
    "__getnewargs__",
    "__match_args__",
    "__slots__",
}
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])
_DEPS = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
_MODELS: dict = {}  # path -> SourceModel, kept between a rank's checks
_TEXTS: dict = {}  # path -> source text, for the release's own cross-module class assignments
_ASSIGNMENTS: dict = {}  # attribute -> {(module, class): "file:line"}, kept between a rank's checks


def protected(name: str, traceback_modules: Collection[str] = ()) -> bool:
    """Whether module ``name`` is one nothing may change: a recorded crash traceback's, or in ``AREAS``."""
    return name in traceback_modules or any(re.search(p, name) for p in AREAS)


def traceback_modules(records: Iterable[dict]) -> list:
    """Every sglang module on the crash tracebacks (the first failing rank's and the other ranks')
    of the run records ``records`` (the shipped ``runtime_runs.json``'s ``runs`` values)."""
    out = set()
    for rec in records:
        tbs = [(rec.get("crash") or {}).get("traceback") or ""]
        tbs += [f.get("traceback") or "" for f in rec.get("rank_failures") or []]
        for tb in tbs:
            for rel in re.findall(r'File "[^"]*?/(sglang/[^"]+?)\.py"', tb):
                out.add(rel.replace("/", ".").removesuffix(".__init__"))
    return sorted(out)


def _under(path: str, roots: Collection[str]) -> bool:
    if not os.path.isabs(path):  # "<string>", "<frozen ...>": code with no file is under no root
        return False
    path = os.path.realpath(path)
    return any(path == r or path.startswith(r + os.sep) for r in roots)


class _Check:
    def __init__(self, allowed_fix: dict, allowed_shim: dict, roots: set, release: set) -> None:
        self.fix, self.shim, self.roots, self.release = allowed_fix, allowed_shim, roots, release
        self.declared: dict = {}  # (module, name) -> the change a fix declares it makes (fixes.changes)
        self.decorator_made: list = []
        self.release_assigned: list = []  # class attributes the release's own code sets from another module
        self.violations, self.opaque, self.interpreted = [], [], set()
        self.fixed, self.shimmed = {}, {}  # (module, name) -> entry
        self.equiv: dict = {}  # (module, name) -> the device equivalence that replaced it (equivalences.changes)
        self.equivalent: dict = {}  # (module, name) -> entry, for each one seen
        self.functions = self.classes = self.attributes = 0

    def bad(self, module: str, name: str, kind: str, detail: str = "") -> None:
        self.violations.append({"module": module, "name": name, "kind": kind, "detail": detail})

    def allowed(self, module: str, name: str, detail: str) -> bool:
        """A change a fix the run asked for, a device equivalence, or a target of an installed shim in an EXEMPT
        module, is listed."""
        kinds = (
            (self.fix, self.fixed, "fix"),
            (self.shim, self.shimmed, "shim"),
            (self.equiv, self.equivalent, "equivalence"),
        )
        for allow, seen, key in kinds:
            by = allow.get((module, name))
            if by is not None:
                change = self.declared.get((module, name)) if key != "shim" else None
                seen.setdefault((module, name), {"module": module, "name": name, key: by, "change": change or detail})
                return True
        return False

    def release_assigns(self, module: str, qualname: str, key: str) -> str | None:
        """Where a loaded release module sets ``qualname.key`` on the class it imported from ``module``
        (``Class.key = ...`` after ``from module import Class``; StandaloneWorkerV2 sets
        ``EagleDraftInput.ALLOC_LEN_PER_DECODE`` so), as ``file:line``; None if no release source does."""
        if key not in _ASSIGNMENTS:
            _ASSIGNMENTS[key] = _cross_module_assignments(self.release, key)
        return _ASSIGNMENTS[key].get((module, qualname))

    def _release_made(self, value) -> bool:
        """A function whose code is in the release's own sources (not its packages, not elsewhere)."""
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        return code is not None and _under(code.co_filename, self.release)

    # -- functions --------------------------------------------------------------------------------

    def _wrapper_ok(self, obj) -> bool:
        code = getattr(obj, "__code__", None)
        if isinstance(obj, types.FunctionType) and code is not None:
            return _under(code.co_filename, self.roots | {_STDLIB})
        mod = sys.modules.get(getattr(type(obj), "__module__", "") or "")
        file = getattr(mod, "__file__", None)
        return mod is not None and (file is None or _under(file, self.roots | {_STDLIB}))

    def function(self, model, module: str, qualname: str, live, kind: tuple) -> None:
        """``kind``: (undecorated, sole) from the source (``SourceModel.defs``)."""
        parts = [live.fget, live.fset, live.fdel] if isinstance(live, property) else [live]
        for part in (p for p in parts if p is not None):
            self._function(model, module, qualname, part, *kind)

    def _function(self, model, module: str, qualname: str, obj, plain: bool, sole: bool) -> None:
        layers = []
        for _ in range(16):
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
                continue
            inner = getattr(obj, "__wrapped__", None)
            if inner is None and not isinstance(obj, types.FunctionType):
                inner = next((getattr(obj, a) for a in ("fn", "func") if callable(getattr(obj, a, None))), None)
            if inner is None:
                break
            layers.append(obj)
            obj = inner
        code = obj.__code__ if isinstance(obj, types.FunctionType) else None
        wrappers_ok = all(map(self._wrapper_ok, layers))
        if layers and all(getattr(getattr(x, "__code__", None), "co_filename", None) == model.path for x in layers):
            plain = False  # the module wraps its own function with its own code (globals()[name] = wrap(...))
        if code is None:
            if (plain and sole) or not wrappers_ok:
                if not self.allowed(module, qualname, f"a {type(obj).__name__}"):
                    self.bad(module, qualname, "not a function from the source", f"a {type(obj).__name__}")
            else:
                self.opaque.append(f"{module}:{qualname} ({type(obj).__name__})")
            return
        self.functions += 1
        where = f"{code.co_filename}:{code.co_firstlineno}"
        ours = code.co_filename == model.path and any(code == c for c in model.codes.get(qualname, ()))
        if not ours and not plain and code.co_filename == model.path and code.co_qualname != qualname:
            # a decorator of the same source whose wrapper does not say what it wraps: find it in the closure
            inner = [
                c.cell_contents
                for c in obj.__closure__ or ()
                if isinstance(c.cell_contents, types.FunctionType) and c.cell_contents.__code__.co_qualname == qualname
            ]
            if any(code == c for c in model.codes.get(code.co_qualname, ())) and inner:
                return self._function(model, module, qualname, inner[0], True, sole)
        if not sole and not ours:  # the name is bound again: code from the source under its own name, or imported
            own = code.co_filename == model.path and any(code == c for c in model.codes.get(code.co_qualname, ()))
            ours = own or code.co_filename != model.path and _under(code.co_filename, self.roots)
        if not ours:
            if not self.allowed(module, qualname, f"code from {where}"):
                self.bad(module, qualname, "function code not the source's", f"code from {where}")
            return
        live_module = sys.modules.get(module)
        if code.co_filename == model.path and live_module is not None and obj.__globals__ is not vars(live_module):
            # the source's own code run under other globals (a name it reads made to mean something else)
            if not self.allowed(module, qualname, "the source's code with other globals"):
                self.bad(module, qualname, "function globals not the module's", f"code from {where}")
            return
        if layers and ((plain and sole) or not wrappers_ok):
            what = [type(x).__name__ for x in layers]
            if not self.allowed(module, qualname, f"wrapped by {what}"):
                self.bad(module, qualname, "wrapped outside the source's decorators", f"wrapped by {what}")

    # -- classes ----------------------------------------------------------------------------------

    def cls(self, model, module: str, cs, live) -> None:
        self.classes += 1
        q = cs.qualname
        if getattr(live, "__module__", None) != module or getattr(live, "__qualname__", None) != q:
            self.bad(module, q, "class not the source's", f"{live.__module__}.{live.__qualname__}")
            return
        if cs.bases is not None:
            alias = {"NamedTuple": "tuple", "TypedDict": "dict"}
            want = [alias.get(b, b) for b in cs.bases] or ["object"]
            have = [b.__name__ for b in live.__bases__]
            if have != want and have != [*want, "Generic"]:
                self.bad(module, q, "bases differ from the source", f"{have} (source {want})")
        generated = self._dataclass(model, module, cs, live) if cs.dataclass is not None else set()
        is_enum = isinstance(live, enum.EnumMeta)
        named_tuple = "NamedTuple" in (cs.bases or ()) and issubclass(live, tuple)
        fields = set(getattr(live, "_fields", ())) if named_tuple else set()
        for key, value in list(vars(live).items()):
            self.attributes += 1
            name = f"{q}.{key}"
            if (key in cs.names or key in cs.outside) and key not in generated:
                slot = type(value).__name__ == "member_descriptor"
                if key in cs.literals and not (is_enum or slot) and key not in fields and cs.literals[key] != value:
                    if not self.allowed(module, name, f"value {value!r}"):
                        self.bad(
                            module, name, "value differs from the source", f"{value!r} (source {cs.literals[key]!r})"
                        )
                continue
            if key in generated:
                continue
            slot = type(value).__name__ == "member_descriptor" and getattr(value, "__objclass__", None) is live
            if slot and (key in cs.annotated or "__slots__" in cs.names):
                continue  # a slotted class's (msgspec Struct, __slots__) storage for a name the source declares
            if cs.decorated and cs.dataclass is None and self._release_made(value):
                self.decorator_made.append(f"{module}:{name}")  # a class decorator of the release added it
                continue
            if is_enum and _sunder_or_dunder(key) and _stdlib_made(value):
                continue
            if named_tuple and key in _NAMEDTUPLE and _namedtuple_made(live, key, value):
                continue
            if key == "__hash__" and value is None and ("__eq__" in cs.names or cs.dataclass is not None):
                continue
            if key in _CLASS_MACHINERY and _stdlib_made(value):
                continue
            if key in _metaclass_made(live) and self._wrapper_ok(value):
                continue
            if key in fields and type(value).__name__ == "_tuplegetter":
                continue
            if self.allowed(module, name, "not in the source"):
                continue
            where = self.release_assigns(module, q, key)
            if where is not None:
                self.release_assigned.append(f"{module}:{name} ({where})")
                continue
            self.bad(module, name, "attribute not in the source", _describe(value))
        for meth, kind in cs.defs.items():
            if meth not in vars(live):
                if cs.decorated and cs.dataclass is None and any(map(self._release_made, vars(live).values())):
                    self.decorator_made.append(f"{module}:{q}.{meth} (removed)")
                    continue
                if not self.allowed(module, f"{q}.{meth}", "removed"):
                    self.bad(module, f"{q}.{meth}", "missing", "defined in the source, absent at run time")
                continue
            self.function(model, module, f"{q}.{meth}", vars(live)[meth], kind)

    def _dataclass(self, model, module: str, cs, live) -> set:
        """The generated names the source's @dataclass makes; each compared with a reference built from
        the source's fields (plus a fix's field); a field the source does not declare is a violation."""
        q = cs.qualname
        live_fields = getattr(live, "__dataclass_fields__", None)
        if not isinstance(live_fields, dict):
            self.bad(module, q, "not a dataclass at run time", "the source decorates it with @dataclass")
            return set()
        base = []
        for b in live.__mro__[-1:0:-1]:
            base += [n for n in getattr(b, "__dataclass_fields__", {}) if n not in base]
        own = [f.name for f in cs.fields if f.kind != "classvar"]
        extra = [n.rpartition(".")[2] for m, n in self.fix if m == module and n.rpartition(".")[0] == q]
        extra = [n for n in extra if n not in own]
        want = base + [n for n in own if n not in base] + [n for n in extra if n in live_fields]
        have = [n for n, f in live_fields.items() if f._field_type is not dataclasses._FIELD_CLASSVAR]
        for n in have:
            if n not in want:
                self.bad(module, f"{q}.{n}", "dataclass field not in the source", "a field at run time only")
        for n in want:
            if n not in have:
                self.bad(module, f"{q}.{n}", "dataclass field missing", "declared in the source")
        for n in extra:
            if n in live_fields:
                self.allowed(module, f"{q}.{n}", "dataclass field added (default None); generated methods rebuilt")
        for f in cs.fields:
            lf = live_fields.get(f.name)
            if f.kind != "field" or lf is None:
                continue
            expect = {"init": True, "repr": True, "compare": True, "hash": None, **f.flags}
            diff = {k: getattr(lf, k) for k, v in expect.items() if k != "kw_only" and getattr(lf, k) != v}
            if (lf.default is not dataclasses.MISSING) != (f.has_default and not f.has_factory):
                diff["default"] = lf.default
            if (lf.default_factory is not dataclasses.MISSING) != f.has_factory:
                diff["default_factory"] = lf.default_factory
            if f.literal is not NO_LITERAL and lf.default is not dataclasses.MISSING and lf.default != f.literal:
                diff["default"] = lf.default
            if diff:
                self.bad(module, f"{q}.{f.name}", "dataclass field differs from the source", repr(diff))
        try:
            ref = _reference(live, cs, [n for n in own + extra if n in live_fields])
        except Exception as exc:  # noqa: BLE001 - cannot rebuild: the generated methods are not checked
            self.bad(module, q, "dataclass could not be rebuilt from the source", f"{type(exc).__name__}: {exc}")
            return set(_DC_GENERATED)
        slots = "__slots__" in vars(ref) and "__slots__" not in cs.names
        names = (set(vars(ref)) & _DC_GENERATED | ({"__slots__", *ref.__slots__} if slots else set())) - cs.names
        if slots:  # a slots dataclass: each field is the new class's member descriptor, not its default
            names |= {n for n in ref.__slots__ if n in cs.names}
        for key in sorted(names):
            a, b = vars(live).get(key, dataclasses.MISSING), vars(ref)[key]
            if not _same_generated(key, a, b):
                name = f"{q}.{key}"
                if not self.allowed(module, name, "generated differently"):
                    self.bad(module, name, "generated method not what the source's fields generate", _describe(a))
        return names


INTERPRETER = (
    "triton.runtime.interpreter"  # TRITON_INTERPRET=1 (a real-runtime setting) puts its names in kernels' modules
)
_NOTHING = object()
_META: dict = {}  # metaclass -> the names it adds to a class


def _metaclass_made(live) -> set:
    """What a custom metaclass (torch's autograd FunctionMeta: ``_backward_cls``) adds to every class it
    makes, read from a probe class built on the first base outside sglang with that metaclass."""
    meta = type(live)
    if meta in (type, enum.EnumMeta) or meta.__module__ == "abc":
        return set()
    if meta not in _META:
        base = next((b for b in live.__mro__[1:] if type(b) is meta and not b.__module__.startswith("sglang")), None)
        try:
            probe = meta("WorkbenchProbe", (base,), {"__module__": __name__}) if base is not None else None
        except Exception:  # noqa: BLE001 - a metaclass that refuses a bare class adds nothing we can name
            probe = None
        _META[meta] = set(vars(probe)) - {"__module__", "__doc__", "__qualname__"} if probe is not None else set()
    return _META[meta]


def _cross_module_assignments(release: set, attr: str) -> dict:
    """{(module, class): "file:line"} for every ``Name.attr = ...`` in a loaded sglang module under ``release``
    whose ``Name`` that file imports with ``from module import Class``; only files whose text holds ``attr``
    are parsed (a rank loads over a thousand sglang modules)."""
    import ast

    out: dict = {}
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if not name.startswith("sglang") or not path or not path.endswith(".py") or not _under(path, release):
            continue
        try:
            if path not in _TEXTS:
                with open(path, encoding="utf-8") as f:
                    _TEXTS[path] = f.read()
            if attr not in _TEXTS[path]:
                continue
            tree = ast.parse(_TEXTS[path], path)
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        imported = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package
                    for _ in range(node.level - 1):
                        parent = parent.rpartition(".")[0]
                    base = f"{parent}.{base}" if base else parent
                for alias in node.names:
                    imported[alias.asname or alias.name] = (base, alias.name)
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                continue
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and t.attr == attr
                    and isinstance(t.value, ast.Name)
                    and t.value.id in imported
                ):
                    rel = path.split(os.sep + "sglang" + os.sep, 1)[-1]
                    out.setdefault(imported[t.value.id], f"{rel}:{node.lineno}")
    return out


def _sunder_or_dunder(key: str) -> bool:
    return bool(re.match(r"^_[^_].*[^_]_$|^__.*__$", key))


def _stdlib_made(value) -> bool:
    """Not code, or code the standard library made (enum, typing, collections' namedtuple)."""
    for obj in (value, getattr(value, "__func__", None)):
        code = getattr(obj, "__code__", None)
        if isinstance(obj, types.FunctionType) and code is not None:
            return _under(code.co_filename, {_STDLIB}) or code.co_filename.startswith("namedtuple_")
    return True


def _namedtuple_made(live, key: str, value) -> bool:
    """``key`` of the NamedTuple ``live`` is what collections.namedtuple makes for its fields."""
    ref = collections.namedtuple(live.__name__, live._fields)
    a, b = getattr(value, "__func__", value), getattr(vars(ref).get(key), "__func__", vars(ref).get(key))
    if isinstance(a, types.FunctionType):
        return isinstance(b, types.FunctionType) and a.__code__ == b.__code__
    return _stdlib_made(value)


def _describe(value) -> str:
    code = getattr(value, "__code__", None)
    if code is not None:
        return f"{type(value).__name__} from {code.co_filename}:{code.co_firstlineno}"
    return f"{type(value).__name__}: {value!r}"[:200]


def _field_facts(f) -> tuple:
    return (
        f.name,
        f.type,
        f.default,
        f.default_factory,
        f.init,
        f.repr,
        f.hash,
        f.compare,
        dict(f.metadata),
        f.kw_only,
        f._field_type,
    )


def _same_generated(key: str, a, b) -> bool:
    if a is dataclasses.MISSING:
        return False
    if key == "__dataclass_fields__":
        return list(a) == list(b) and all(_field_facts(a[k]) == _field_facts(b[k]) for k in a)
    if key == "__dataclass_params__":
        return repr(a) == repr(b)
    if type(a).__name__ == "member_descriptor":  # a slots dataclass's field
        return type(b) is type(a) and a.__name__ == b.__name__
    a, b = (getattr(x, "__wrapped__", x) for x in (a, b))  # __repr__ is wrapped by reprlib's recursion guard
    ca, cb = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if ca is not None or cb is not None:
        return ca is not None and cb is not None and ca == cb and ca.co_filename == cb.co_filename
    return a == b


def _reference(live, cs, names: list):
    """A fresh class with the live class's bases and the source's annotated fields ``names`` (defaults
    and flags from the live fields), decorated with the source's @dataclass arguments."""
    fields = live.__dataclass_fields__
    ns = {"__module__": live.__module__, "__qualname__": live.__qualname__, "__annotations__": {}}
    ann = vars(live).get("__annotations__", {})
    field_names = {f.name for f in cs.fields}
    ns.update({k: v for k, v in vars(live).items() if k in cs.names and k not in field_names})  # __post_init__, ...
    order = [f.name for f in cs.fields] + [n for n in names if n not in {f.name for f in cs.fields}]
    for f in cs.fields:
        if f.kind != "field" and f.name in ann:
            ns[f.name] = vars(live).get(f.name, dataclasses.MISSING)
            if ns[f.name] is dataclasses.MISSING:
                del ns[f.name]
    for n in order:
        if n in ann and n not in names:
            ns["__annotations__"][n] = ann[n]
            continue
        if n not in names:
            continue
        lf = fields[n]
        ns["__annotations__"][n] = ann.get(n, lf.type)
        ns[n] = dataclasses.field(
            default=lf.default,
            default_factory=lf.default_factory,
            init=lf.init,
            repr=lf.repr,
            hash=lf.hash,
            compare=lf.compare,
            metadata=dict(lf.metadata) or None,
            kw_only=lf.kw_only,
        )
    params = {k: v for k, v in cs.dataclass.items() if v is not NO_LITERAL}
    return dataclasses.dataclass(type(live)(live.__name__, live.__bases__, ns), **params)


def check_module(module: types.ModuleType, chk: _Check, roots: set) -> None:
    """Hold one loaded module against its source (module docstring); results go to ``chk``."""
    name, path = module.__name__, getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return
    if roots and not _under(path, roots):
        chk.bad(name, "", "module loaded from outside the release", path)
        return
    if type(module) is not types.ModuleType:
        chk.bad(name, "", "module object replaced", type(module).__name__)
    model = _MODELS.get(path)
    if model is None:
        model = _MODELS[path] = SourceModel(path)
    interpreter = sys.modules.get(INTERPRETER) if os.environ.get("TRITON_INTERPRET") == "1" else None
    star: set = set()
    for mod, level in model.star_imports:
        base = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for _ in range(level - 1):
            base = base.rpartition(".")[0]
        src = sys.modules.get(f"{base}.{mod}" if level and mod else base if level else mod)
        star |= set(getattr(src, "__all__", None) or (k for k in vars(src or types) if not k.startswith("_")))
    for key, value in list(vars(module).items()):
        if key in model.names:
            if key in model.literals and model.literals[key] != value and not chk.allowed(name, key, repr(value)):
                chk.bad(name, key, "value differs from the source", f"{value!r} (source {model.literals[key]!r})")
            continue
        if key in _MODULE_MACHINERY or key in star:
            continue
        if interpreter is not None and vars(interpreter).get(key, _NOTHING) is value:
            chk.interpreted.add(name)  # Triton's interpreter runs kernels with its own names in their globals
            continue
        if isinstance(value, types.ModuleType) and sys.modules.get(f"{name}.{key}") is value:
            continue  # a submodule, set by the import system
        if not chk.allowed(name, key, "not in the source"):
            chk.bad(name, key, "attribute not in the source", _describe(value))
    for fn, (plain, sole) in model.defs.items():
        if fn not in vars(module):
            if fn in model.unconditional and sole and not chk.allowed(name, fn, "removed"):
                chk.bad(name, fn, "missing", "defined in the source, absent at run time")
            continue
        value = vars(module)[fn]
        if isinstance(value, type) and not sole:
            continue  # a class bound under a def's name elsewhere in the source
        chk.function(model, name, fn, value, (plain, sole))
    for q, cs in model.classes.items():
        live = module
        for part in q.split("."):
            live = getattr(live, part, None)
        if isinstance(live, type):
            chk.cls(model, name, cs, live)
        elif live is None and "." not in q and q in model.unconditional and not chk.allowed(name, q, "removed"):
            chk.bad(name, q, "missing", "class defined in the source, absent at run time")


def allowed_changes(fix_changes: Iterable[dict] = (), shims: Iterable[dict] = ()) -> tuple:
    """({(module, name): fix}, {(module, name): shim}) from ``fixes.changes`` and ``shims.apply``'s records;
    a shim target is allowed only in an EXEMPT module."""
    fix = {(c["module"], c["name"]): c["fix"] for c in fix_changes}
    shim = {}
    for s in shims:
        if not s.get("installed"):
            continue
        for target in s["targets"]:
            mod = next((m for m in EXEMPT if target.startswith(m + ".")), None)
            if mod is not None:
                shim[(mod, target[len(mod) + 1 :])] = s["name"]
    return fix, shim


def check(
    fix_changes: Iterable[dict] = (),
    shims: Iterable[dict] = (),
    traceback_mods: Collection[str] = (),
    roots: Iterable[str] = (),
    equivalence_changes: Iterable[dict] = (),
) -> dict:
    """Every loaded protected module held against its source; ``violations`` must be empty.

    ``fix_changes``: ``fixes.changes(applied)``; ``shims``: ``shims.apply``'s records; ``traceback_mods``:
    ``traceback_modules`` of the shipped records; ``roots``: the release's source folders (a protected
    module loaded from elsewhere is a violation; a decorator's wrapper must come from there or from the
    environment's packages). Empty ``roots``: the sglang package's parent, as imported.
    ``equivalence_changes``: ``equivalences.changes(applied)``, the device equivalences the run installed:
    each is the source's own code with other globals, listed under ``equivalences``, never a violation."""
    fix_changes = list(fix_changes)
    roots = {os.path.realpath(r) for r in roots}
    if not roots and "sglang" in sys.modules:
        roots = {os.path.dirname(os.path.dirname(os.path.realpath(sys.modules["sglang"].__file__)))}
    fix, shim = allowed_changes(fix_changes, shims)
    chk = _Check(fix, shim, roots | _DEPS, roots)
    equivalence_changes = list(equivalence_changes)
    chk.declared = {(c["module"], c["name"]): c.get("change") for c in [*fix_changes, *equivalence_changes]}
    chk.equiv = {(c["module"], c["name"]): c["equivalence"] for c in equivalence_changes}
    names = sorted(
        n
        for n in list(sys.modules)
        if n.startswith("sglang.") and (protected(n, traceback_mods) or n in EXEMPT) and sys.modules[n] is not None
    )
    for n in names:
        try:
            check_module(sys.modules[n], chk, roots)
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            chk.bad(n, "", "source unreadable", f"{type(exc).__name__}: {exc}")
    return {
        "modules": len(names),
        "module_names": names,
        "functions": chk.functions,
        "classes": chk.classes,
        "attributes": chk.attributes,
        "violations": chk.violations,
        "fixed": list(chk.fixed.values()),
        "shimmed": list(chk.shimmed.values()),
        "equivalences": list(chk.equivalent.values()),
        "opaque": chk.opaque,
        "interpreter_globals": sorted(chk.interpreted),
        "decorator_made": chk.decorator_made,
        "release_assigned": chk.release_assigned,
        "exempt": {m: EXEMPT[m] for m in names if m in EXEMPT},
    }
