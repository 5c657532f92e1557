"""Device equivalences without sglang: on stand-in modules shaped like 0.5.23's (named as stand-ins), a
function runs its own code with ``_is_cpu`` False, the module keeps its CPU flag, importers see the new
function, and a function whose shape differs from what the equivalence names is refused. Also the
``verify-input`` fix on a dataclass whose required field is declared with ``field()`` over an inherited
default (0.5.23's ``EagleVerifyInput.custom_mask``). The values on the real 0.5.23 objects are checked in
tests/upstream/runtime/test_runtime_network.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from upstream_fixtures import in_release

from workbench.upstream.runtime import equivalences

# Stand-ins for 0.5.23's eagle_utils.default_tree_mask_mode and ForwardBatch._pad_inputs_to_size: the
# same branch written the same way, in files laid out as sglang's.
EAGLE_UTILS = """
import enum
_is_cpu = True
class TreeMaskMode(enum.IntEnum):
    FULL_MASK = 0
    QLEN_ONLY = 1
def default_tree_mask_mode():
    # the CPU kernel (intel_amx) reads QLEN_ONLY
    return TreeMaskMode.QLEN_ONLY if _is_cpu else TreeMaskMode.FULL_MASK
{extra}
"""
FORWARD_BATCH_INFO = """
_is_cpu = True
SCALE = 1
class ForwardBatch:
    def _pad_inputs_to_size(self, model_runner, num_tokens, bs):
        seq_len_fill_value = (
            model_runner.attn_backend.get_cpu_graph_seq_len_fill_value()
            if _is_cpu
            else model_runner.attn_backend.get_cuda_graph_seq_len_fill_value()
        )
        return [seq_len_fill_value * SCALE] * bs
"""
WORKER = "from sglang.srt.speculative.eagle_utils import default_tree_mask_mode\n"
SCRIPT = """
import sys, json, types
{boot}from sglang.srt.speculative import eagle_utils
from sglang.srt.model_executor import forward_batch_info as fbi
from wb_upstream.runtime import equivalences
code = eagle_utils.default_tree_mask_mode.__code__
applied = equivalences.apply("stand-in")
from sglang.srt.speculative import worker
class Backend:  # a triton-like backend: a CUDA fill value, no CPU one
    def get_cuda_graph_seq_len_fill_value(self):
        return 1
runner = types.SimpleNamespace(attn_backend=Backend())
fb = fbi.ForwardBatch()
pad = fb._pad_inputs_to_size(runner, 2, 2)
fbi.SCALE = 7  # a module global changed later is seen: the globals are a view of the live module
print(json.dumps({{
    "applied": applied,
    "mode": eagle_utils.default_tree_mask_mode().name,
    "importer": worker.default_tree_mask_mode().name,
    "same_code": eagle_utils.default_tree_mask_mode.__code__ is code,
    "module_flags": [eagle_utils._is_cpu, fbi._is_cpu],
    "pad": pad, "pad_later": fbi.ForwardBatch()._pad_inputs_to_size(runner, 2, 1),
    "touched": equivalences.touched(applied),
}}))
"""


def _stand_in(root: Path, extra: str = "", pad: str = FORWARD_BATCH_INFO) -> None:
    for sub in ("sglang", "sglang/srt", "sglang/srt/model_executor", "sglang/srt/speculative"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "sglang/srt/speculative/eagle_utils.py").write_text(EAGLE_UTILS.format(extra=extra))
    (root / "sglang/srt/speculative/worker.py").write_text(WORKER)
    (root / "sglang/srt/model_executor/forward_batch_info.py").write_text(pad)


def _run(root: Path) -> dict:
    script = SCRIPT.format(boot=in_release(str(root)))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=root)
    return json.loads(out.stdout)


def test_equivalences_run_the_releases_own_code_on_its_cuda_branch(tmp_path: Path) -> None:
    _stand_in(tmp_path)
    got = _run(tmp_path)
    by_name = {a["name"]: a for a in got["applied"]}
    assert set(by_name) == {"dp-padding-fill-value", "verify-tree-mask-mode"}
    assert all(a["installed"] for a in got["applied"])
    assert by_name["dp-padding-fill-value"]["upstream"] == ["sglang/srt/model_executor/forward_batch_info.py:6-10"]
    assert by_name["verify-tree-mask-mode"]["upstream"] == ["sglang/srt/speculative/eagle_utils.py:9"]
    assert by_name["verify-tree-mask-mode"]["rebound"] == []  # the importer was loaded after: it reads the new one
    assert got["mode"] == got["importer"] == "FULL_MASK" and got["same_code"]
    assert got["module_flags"] == [True, True]  # the modules' own flag is untouched
    assert got["pad"] == [1, 1] and got["pad_later"] == [7]
    assert got["touched"] == {
        "sglang.srt.model_executor.forward_batch_info:ForwardBatch._pad_inputs_to_size": "dp-padding-fill-value",
        "sglang.srt.speculative.eagle_utils:default_tree_mask_mode": "verify-tree-mask-mode",
    }


def test_an_importer_loaded_before_is_rebound(tmp_path: Path) -> None:
    _stand_in(tmp_path)
    script = SCRIPT.replace(
        "import equivalences\n", "import equivalences\nfrom sglang.srt.speculative import worker\n", 1
    )
    assert script != SCRIPT
    script = script.format(boot=in_release(str(tmp_path)))
    out = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    by_name = {a["name"]: a for a in out["applied"]}
    assert by_name["verify-tree-mask-mode"]["rebound"] == ["sglang.srt.speculative.worker.default_tree_mask_mode"]
    assert out["importer"] == "FULL_MASK"


def test_a_function_testing_the_flag_elsewhere_is_refused(tmp_path: Path) -> None:
    pad = FORWARD_BATCH_INFO.replace("        return [", "        if _is_cpu:\n            bs += 0\n        return [")
    _stand_in(tmp_path, pad=pad)
    got = _run_refused(tmp_path)
    entry = next(a for a in got if a["name"] == "dp-padding-fill-value")
    assert entry["installed"] is False  # the second test also holds the anchor: a count, not lines, refuses it
    assert "reads _is_cpu 2 time(s), at lines [8, 11]" in entry["reason"]


def test_a_function_binding_a_global_is_refused(tmp_path: Path) -> None:
    extra = (
        "def default_tree_mask_mode():\n    global _is_cpu\n"
        "    return TreeMaskMode.QLEN_ONLY if _is_cpu else TreeMaskMode.FULL_MASK\n"
    )
    _stand_in(tmp_path, extra=extra)
    got = _run_refused(tmp_path)
    entry = next(a for a in got if a["name"] == "verify-tree-mask-mode")
    assert entry["installed"] is False and "binds a global" in entry["reason"]


def _run_refused(root: Path) -> list:
    script = in_release(str(root)) + textwrap.dedent(
        """
        import json
        from wb_upstream.runtime import equivalences
        print(json.dumps(equivalences.apply("stand-in")))
        """
    )
    return json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)


def test_a_release_without_the_branch_needs_none(tmp_path: Path) -> None:
    pad = FORWARD_BATCH_INFO.replace("if _is_cpu\n", "if False\n")  # no _is_cpu branch (0.5.14 has none)
    _stand_in(tmp_path, pad=pad)
    entry = next(a for a in _run_refused(tmp_path) if a["name"] == "dp-padding-fill-value")
    assert entry["installed"] is False
    assert entry["reason"] == "not needed in sglang stand-in: ForwardBatch._pad_inputs_to_size has no _is_cpu branch"


def test_every_equivalence_names_both_branches_and_why() -> None:
    names = [e.name for e in equivalences.EQUIVALENCES]
    assert len(names) == len(set(names))
    for e in equivalences.EQUIVALENCES:
        assert e.module.startswith("sglang.srt.") and e.cpu_branch != e.cuda_branch
        assert "_is_cpu" in e.anchor and len(e.why) > 80 and "CUDA" in e.why


FIELD_SCRIPT = """
import sys, dataclasses
{boot}from wb_upstream.runtime import fixes
from dataclasses import dataclass, field
class SpecInput:  # stand-in for 0.5.23's SpecInput, whose custom_mask defaults to None
    custom_mask = None
@dataclass
class EagleVerifyInput(SpecInput):
    draft_token: int
    custom_mask: int = field()
    positions: int
    topk: int = 1
fixes.add_field(EagleVerifyInput)
try:
    EagleVerifyInput(1)
    required = "not required"
except TypeError as exc:
    required = str(exc)
print(repr(([f.name for f in dataclasses.fields(EagleVerifyInput)], repr(EagleVerifyInput(1, 2, 3)), required)))
"""


def test_verify_input_keeps_a_field_declared_required_required() -> None:
    script = FIELD_SCRIPT.format(boot=in_release())
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    names, text, required = eval(out.stdout)  # noqa: S307 - our own repr of plain values
    assert names == ["draft_token", "custom_mask", "positions", "topk", "kv_indptr"]
    assert text == "EagleVerifyInput(draft_token=1, custom_mask=2, positions=3, topk=1, kv_indptr=None)"
    assert "'custom_mask' and 'positions'" in required
