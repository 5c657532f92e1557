"""The live shim guard on stand-in sglang packages (no sglang needed): what the source defines is
accepted (dataclasses with generated methods, NamedTuple, Enum, properties, decorators), and every
kind of change made from outside is a violation naming the class and attribute, whoever made it;
the fixes' changes are listed under ``fixed``; and the boundary test: each shim, installed into a
tree of stand-in modules, changes exactly the names it declares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from upstream_fixtures import in_release

from workbench.upstream.in_release import shims

EAGLE_INFO = """
import enum
import functools
from dataclasses import dataclass, field
from typing import NamedTuple, Optional


class SpecInput:
    def is_draft_input(self):
        return False


class Mode(enum.IntEnum):
    A = 1
    B = 2


class Pair(NamedTuple):
    a: int
    b: int = 0


@dataclass
class EagleDraftExtendInput(SpecInput):
    hidden_states: object
    num_tokens_per_req: int = 1
    extra: list = field(default_factory=list)
    label: str = "draft-extend"

    def __post_init__(self):
        self.ready = True

    @property
    def size(self):
        return self.num_tokens_per_req

    @staticmethod
    def create_idle_input(device):
        return EagleDraftExtendInput(hidden_states=None)



@dataclass
class EagleVerifyInput(SpecInput):
    draft_token: object
    topk: int = 1


def make():
    return EagleDraftExtendInput(hidden_states=None)


@functools.lru_cache(maxsize=None)
def cached(n):
    return n


@dataclass(slots=True)
class Slotted:
    a: int = 0


def register(cls):
    return cls


@register
class Registered:
    def m(self):
        return 1


def _deprecated(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)

    return wrapper


def old_name():
    return 1


globals()["old_name"] = _deprecated(old_name)  # the module wraps its own function with its own code
"""

BACKEND = """
class TritonAttnBackend:
    def init_forward_metadata(self, forward_batch):
        return forward_batch.spec_info.kv_indptr
"""

GUARD_SCRIPT = """
import sys, functools, dataclasses
{boot}from wb_upstream.runtime import shim_guard, fixes
from sglang.srt.speculative import eagle_info as ei
from sglang.srt.layers.attention import triton_backend as tb
changes = []
{mutation}
print(repr(shim_guard.check(changes)))
"""

MUTATIONS = {
    "class attribute (the seed's hiding shim)": (
        "ei.EagleDraftExtendInput.kv_indptr = None",
        {("EagleDraftExtendInput.kv_indptr", "attribute not in the source")},
    ),
    "__getattr__ on the backend": (
        "tb.TritonAttnBackend.__getattr__ = lambda self, name: None",
        {("TritonAttnBackend.__getattr__", "attribute not in the source")},
    ),
    "__getattribute__ on a spec input": (
        "ei.EagleVerifyInput.__getattribute__ = lambda self, name: object.__getattribute__(self, name)",
        {("EagleVerifyInput.__getattribute__", "attribute not in the source")},
    ),
    "module __getattr__": (
        "ei.__getattr__ = lambda name: None",
        {("__getattr__", "attribute not in the source")},
    ),
    "a method wrapped with functools.wraps": (
        "orig = tb.TritonAttnBackend.init_forward_metadata\n"
        "tb.TritonAttnBackend.init_forward_metadata = functools.wraps(orig)(lambda self, fb: orig(self, fb))",
        {("TritonAttnBackend.init_forward_metadata", "wrapped outside the source's decorators")},
    ),
    "a function's code swapped in place": (
        "ei.make.__code__ = (lambda: None).__code__",
        {("make", "function code not the source's")},
    ),
    "a field added by re-running @dataclass": (
        "fixes.add_field(ei.EagleDraftExtendInput)",
        {
            ("EagleDraftExtendInput.kv_indptr", "dataclass field not in the source"),
            ("EagleDraftExtendInput.kv_indptr", "attribute not in the source"),
            ("EagleDraftExtendInput.__init__", "generated method not what the source's fields generate"),
            ("EagleDraftExtendInput.__repr__", "generated method not what the source's fields generate"),
            ("EagleDraftExtendInput.__eq__", "generated method not what the source's fields generate"),
            ("EagleDraftExtendInput.__dataclass_fields__", "generated method not what the source's fields generate"),
            ("EagleDraftExtendInput.__match_args__", "generated method not what the source's fields generate"),
        },
    ),
    "a base swapped for one with __getattr__": (
        "class Lenient(ei.SpecInput):\n    def __getattr__(self, name):\n        return None\n"
        "ei.EagleVerifyInput.__bases__ = (Lenient,)",
        {("EagleVerifyInput", "bases differ from the source")},
    ),
    "a literal class value changed": (
        "ei.Mode  # enums keep their members\nei.EagleDraftExtendInput.label = 'other'",
        {("EagleDraftExtendInput.label", "value differs from the source")},
    ),
    "a function added to a decorated class": (
        "ei.Registered.extra = lambda self: 1",
        {("Registered.extra", "attribute not in the source")},
    ),
    "a method deleted": (
        "del tb.TritonAttnBackend.init_forward_metadata",
        {("TritonAttnBackend.init_forward_metadata", "missing")},
    ),
    "the fix pr-28221, asked for": (
        "changes = fixes.changes(fixes.apply(['pr-28221']))",
        set(),
    ),
    "a function's own code run under other globals": (
        "import types\nei.make = types.FunctionType(ei.make.__code__, {**vars(ei), 'Pair': None}, 'make')",
        {("make", "function globals not the module's")},
    ),
}


def _tree(root: Path) -> None:
    for sub in ("sglang", "sglang/srt", "sglang/srt/speculative", "sglang/srt/layers", "sglang/srt/layers/attention"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "sglang/srt/speculative/eagle_info.py").write_text(EAGLE_INFO)
    (root / "sglang/srt/layers/attention/triton_backend.py").write_text(BACKEND)


def _guard(tmp_path: Path, mutation: str) -> dict:
    _tree(tmp_path)
    script = GUARD_SCRIPT.format(boot=in_release(str(tmp_path)), mutation=mutation)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout)  # noqa: S307 - our own repr of plain dicts


def test_the_sources_own_definitions_are_accepted(tmp_path: Path) -> None:
    """Generated dataclass methods (rebuilt from the source's fields, __post_init__ included), a
    NamedTuple's and an Enum's machinery, a property, a staticmethod and an lru_cache are the source's."""
    got = _guard(tmp_path, "ei.make(); ei.cached(1); ei.Pair(1); ei.Slotted(); ei.old_name()")
    assert got["violations"] == [] and got["fixed"] == []
    assert got["classes"] == 8 and got["functions"] >= 8
    assert set(got["module_names"]) >= {
        "sglang.srt.speculative.eagle_info",
        "sglang.srt.layers.attention.triton_backend",
    }


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_every_change_from_outside_is_a_violation(tmp_path: Path, what: str) -> None:
    mutation, expected = MUTATIONS[what]
    got = _guard(tmp_path, textwrap.dedent(mutation))
    assert {(v["name"], v["kind"]) for v in got["violations"]} == expected
    if what.startswith("the fix"):
        assert [(f["name"], f["fix"]) for f in got["fixed"]] == [("EagleDraftExtendInput.kv_indptr", "pr-28221")]


def test_a_declared_device_equivalence_is_listed_not_a_violation(tmp_path: Path) -> None:
    """The same globals swap, declared as a device equivalence (equivalences.changes' shape), is listed
    under ``equivalences`` with the change it makes; the guard still counts it as held."""
    _tree(tmp_path)
    mutation = (
        "import types\n"
        "ei.make = types.FunctionType(ei.make.__code__, {**vars(ei), 'Pair': None}, 'make')\n"
        "eq = [{'equivalence': 'stand-in', 'module': ei.__name__, 'name': 'make', 'change': 'its CUDA branch'}]\n"
        "print(repr(shim_guard.check(changes, (), (), (), eq)))\n"
        "raise SystemExit(0)"
    )
    script = GUARD_SCRIPT.format(boot=in_release(str(tmp_path)), mutation=mutation)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = eval(out.stdout)  # noqa: S307 - our own repr of plain dicts
    assert got["violations"] == []
    assert [(e["name"], e["equivalence"], e["change"]) for e in got["equivalences"]] == [
        ("make", "stand-in", "its CUDA branch")
    ]


RELEASE_WORKER = """
class StandaloneWorker:
    def __init__(self, n):
        from sglang.srt.speculative.eagle_info import EagleVerifyInput as Verify

        Verify.ALLOC_LEN_PER_DECODE = n
"""


def test_a_class_attribute_the_release_sets_from_another_module_is_listed(tmp_path: Path) -> None:
    """0.5.23's StandaloneWorkerV2 sets ``EagleDraftInput.ALLOC_LEN_PER_DECODE``, which eagle_info.py does not
    define: a stand-in release module doing the same (imported under another name) is listed with its line,
    while the same kind of change to another attribute, which no release source makes, stays a violation."""
    _tree(tmp_path)
    (tmp_path / "sglang/srt/speculative/standalone_worker.py").write_text(RELEASE_WORKER)
    got = _guard(
        tmp_path,
        "from sglang.srt.speculative import standalone_worker\nstandalone_worker.StandaloneWorker(4)\n"
        "ei.EagleVerifyInput.kv_indptr = None",
    )
    assert got["release_assigned"] == [
        "sglang.srt.speculative.eagle_info:EagleVerifyInput.ALLOC_LEN_PER_DECODE "
        "(srt/speculative/standalone_worker.py:6)"
    ]
    assert [(v["name"], v["kind"]) for v in got["violations"]] == [
        ("EagleVerifyInput.kv_indptr", "attribute not in the source")
    ]


STAND_IN_FILES = {  # anchor file -> the upstream code a shim passes (stand-ins, named as such)
    "srt/mem_cache/memory_pool_host.py": "try:\n    from sgl_kernel.kvcacheio import transfer_kv_per_layer\n"
    "except ImportError:\n    pass\n",
    "kernels/ops/kvcache/cache_move.py": "def f():\n    from sgl_kernel import copy_all_layer_kv_cache_cpu\n",
    "srt/models/llama.py": "import torch\ndef set_embed(self):\n    torch.cuda.synchronize()\n",
    "srt/managers/overlap_utils.py": "def f(t, torch):\n"
    "    t.record_stream(torch.get_device_module().current_stream())\n",
    "srt/speculative/eagle_utils.py": "def build(*a):\n    return sgl_build_tree_kernel_efficient(*a)\n"
    "def verify_tree_greedy_func(*a, **k):\n    return a\n",
    "srt/speculative/triton_ops/cache_locs.py": "def next_power_of_2(n):\n    return n\n"
    "assign_extend_cache_locs = None\n"
    "def assign_extend_cache_locs_func(req_pool_indices, req_to_token, start_offset, end_offset, batch_size, "
    "draft_token_num, device):\n    return None\n",
    "srt/model_executor/forward_batch_info.py": "import torch\ndef f():\n"
    "    return torch.tensor([1], pin_memory=True)\n",
    "srt/speculative/eagle_info.py": 'import torch\ndef f():\n    return torch.zeros(1, device="cuda")\n',
    "srt/distributed/parallel_state.py": "class GroupCoordinator:\n"
    "    def all_gather_into_tensor(self, output, input):\n        reg_all_gather_into_tensor(output, input)\n"
    "    def reduce_scatter_tensor(self, output, input):\n        pass\n",
}
SPEC_TREE = """
from enum import IntEnum
class TreeMaskMode(IntEnum):
    FULL_MASK = 0
def sgl_build_tree_kernel_efficient_triton(*a):
    return a
def verify_tree_greedy_kernel_triton(*a):
    return a
def sgl_build_tree_kernel_triton(*a):
    return a
def verify_tree_greedy_triton(**k):
    return k
"""

BOUNDARY_SCRIPT = """
import sys, os, importlib, importlib.util, types, json
{boot}import torch, triton, triton.language
for dirpath, _, files in os.walk(os.path.join({root!r}, "sglang")):
    for f in files:
        rel = os.path.relpath(os.path.join(dirpath, f), {root!r})[:-3].replace(os.sep, ".")
        if rel.endswith("__init__"):
            rel = rel[:-9]
        try:
            importlib.import_module(rel)
        except ImportError:
            pass
def importable(name):  # what `import name` would give now, without keeping it
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(vars(module))

def snapshot():
    out = {{}}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "torch" or name.startswith(("sglang", "torch.cuda"))):
            continue
        for k, v in list(vars(mod).items()):
            out[f"{{name}}.{{k}}"] = id(v)
            if isinstance(v, type) and v.__module__ == name or (name == "torch" and k == "Tensor"):
                for ck, cv in list(vars(v).items()):
                    out[f"{{name}}.{{k}}.{{ck}}"] = id(cv)
    names = importable("sgl_kernel")  # the stand-in tree imports it; no sgl_kernel is installed here
    if names is not None:
        out["sgl_kernel"] = 1
        out.update({{f"sgl_kernel.{{n}}": 1 for n in names if not n.startswith("__") and n != "WORKBENCH_STANDIN"}})
    return out

from wb_upstream.in_release import shims
changed = {{}}
for shim in shims.SHIMS:
    before = snapshot()
    shim.install()
    after = snapshot()
    changed[shim.name] = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
print(json.dumps(changed))
"""


def test_each_shim_changes_exactly_what_it_declares(tmp_path: Path) -> None:
    """The boundary test: every shim installed into a tree of stand-in sglang modules (each anchor
    file a stand-in for the upstream lines it passes), one after another; the names each install()
    changed (module and class attributes, torch's, what ``import sgl_kernel`` now gives) equal its
    declared targets."""
    for rel, text in STAND_IN_FILES.items():
        path = tmp_path / "sglang" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for d in [p for p in (tmp_path / "sglang").rglob("*") if p.is_dir()] + [tmp_path / "sglang"]:
        (d / "__init__.py").touch()
    spec_tree = tmp_path / "spec_tree.py"
    spec_tree.write_text(SPEC_TREE)
    script = BOUNDARY_SCRIPT.format(root=str(tmp_path), boot=in_release(str(tmp_path)))
    env = {**os.environ, "WB_SPEC_TREE_SRC": str(spec_tree), "TRITON_INTERPRET": "1", "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    for shim in shims.SHIMS:
        got = set(changed[shim.name])
        if shim.name == "sgl-kernel-import-standin":  # a finder: the package becomes importable
            assert got == {"sgl_kernel"}, got
            continue
        assert got == set(shim.targets), (shim.name, sorted(got ^ set(shim.targets)))
