"""Small synthetic sglang trees for the offline upstream tests (no network, no release sources)."""

from __future__ import annotations

import json
import textwrap
import time
import zipfile
from pathlib import Path

from workbench.upstream.release_process import REGISTER, UPSTREAM
from workbench.upstream.sources.trees import SourceTree, memory_tree

SPEC_DIR = "sglang/srt/speculative/"
ATTN_DIR = "sglang/srt/layers/attention/"
MODES_FILE = "sglang/srt/model_executor/forward_batch_info.py"
KNOWN = ["0.5.11", "0.5.12", "0.5.13", "0.5.13.post1", "0.5.14"]

MODES = textwrap.dedent("""
    class ForwardMode(IntEnum):
        EXTEND = auto()
        DECODE = auto()
        IDLE = auto()
        TARGET_VERIFY = auto()
        DRAFT_EXTEND_V2 = auto()
        def is_decode_or_idle(self):
            return self == ForwardMode.DECODE or self == ForwardMode.IDLE
        def is_target_verify(self):
            return self == ForwardMode.TARGET_VERIFY
        def is_extend(self, include_v2: bool = False):
            return self == ForwardMode.EXTEND or (include_v2 and self == ForwardMode.DRAFT_EXTEND_V2)
        def is_idle(self):
            return self == ForwardMode.IDLE
""")


def write_fake_cache(tmp_path: Path, releases: dict[str, dict[str, str]]) -> Path:
    """A cache whose wheels hold `releases` ({version: {path below the wheel root: text}})."""
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "releases.json").write_text(json.dumps({"fetched_at": time.time(), "versions": KNOWN}))
    for version, files in releases.items():
        with zipfile.ZipFile(cache / "wheels" / f"sglang-{version}-py3-none-any.whl", "w") as zf:
            for name, text in files.items():
                zf.writestr(name, text)
            zf.writestr(
                f"sglang-{version}.dist-info/METADATA",
                "Name: sglang\nRequires-Dist: transformers==5.8.1\n"
                "Requires-Dist: openai==2.6.1\nRequires-Dist: av; sys_platform == 'darwin'\n",
            )
    return cache


SPEC = textwrap.dedent("""
    from dataclasses import dataclass
    class SpecInput:
        custom_mask = None
        def __init__(self, spec_input_type):
            self.spec_input_type = spec_input_type
        def is_draft_input(self):
            return self.spec_input_type in {SpecInputType.DRAFT, SpecInputType.DRAFT_EXTEND}
    @dataclass
    class DraftInput(SpecInput):
        kv_indptr: "Tensor" = None
        kv_indices: "Tensor" = None
        hidden_states: "Tensor" = None
        def __post_init__(self):
            super().__init__(SpecInputType.DRAFT)
    @dataclass
    class DraftExtendInput(SpecInput):
        hidden_states: "Tensor" = None
        KV_FIELD
        def __post_init__(self):
            super().__init__(SpecInputType.DRAFT_EXTEND)
        @classmethod
        def create_idle_input(cls, device):
            return cls()
        def prepare(self):
            self.positions = None
    class VerifyInput(SpecInput):
        def __init__(self):
            super().__init__(SpecInputType.VERIFY)
            self.draft_token_num = 4
""")

WORKER = textwrap.dedent("""
    class Worker:
        def _draft_extend_for_decode(self, batch):
            extend_input = DraftExtendInput(hidden_states=None)
            self.prepare_for_draft_extend(extend_input, batch)
        def prepare_for_draft_extend(self, draft_extend_input: DraftExtendInput, batch):
            batch.spec_info = draft_extend_input
            batch.forward_mode = ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
        def idle_extend_seed(self):
            return DraftExtendInput.create_idle_input(device="cpu")
        def idle_draft(self, batch):
            batch.spec_info = DraftInput.create_idle_input(device="cpu")
        def verify(self, batch):
            batch.spec_info = VerifyInput()
            batch.forward_mode = ForwardMode.TARGET_VERIFY
""")

BACKEND = textwrap.dedent("""
    class Updater:
        def __init__(self):
            self.update = self.update_single
        def update(self, spec_info):
            raise NotImplementedError()
        def update_single(self, spec_info):
            if spec_info is None or getattr(spec_info, "kv_indptr", None) is None:
                pass
            else:
                x = spec_info.kv_indptr
    class Backend:
        def __init__(self):
            self.updater = Updater()
        def init_forward_metadata(self, forward_batch):
            spec_info = forward_batch.spec_info
            if forward_batch.forward_mode.is_decode_or_idle():
                if spec_info is None or spec_info.kv_indptr is None:
                    self._fallback(forward_batch)
                else:
                    kv_indptr = spec_info.kv_indptr
                self.updater.update(spec_info=forward_batch.spec_info)
            elif forward_batch.forward_mode.is_target_verify():
                mask = spec_info.custom_mask
                n = spec_info.draft_token_num
                if hasattr(spec_info, "seq_lens_cpu"):
                    y = spec_info.seq_lens_cpu
                if isinstance(spec_info, DraftInput):
                    z = spec_info.kv_indices
            else:
                w = getattr(spec_info, "num_tokens_per_req", None)
        def _fallback(self, forward_batch):
            if forward_batch.spec_info.is_draft_input():
                q = forward_batch.spec_info.hidden_states
""")


def toy_tree(with_field: bool) -> SourceTree:
    """The toy release: the V2-style draft-extend idle input with (fixed) or without (regressed) kv_indptr."""
    field = "kv_indptr: 'Tensor' = None" if with_field else "pass"
    files = {
        MODES_FILE: MODES,
        f"{SPEC_DIR}info.py": SPEC.replace("KV_FIELD", field),
        f"{SPEC_DIR}worker.py": WORKER,
        f"{ATTN_DIR}toy_backend.py": BACKEND,
    }
    return memory_tree(files, "toy")


def in_release(*first: str) -> str:
    """Python source that sets a plain interpreter up as ``release_process``'s boot sets up a release's:
    ``first`` first on ``sys.path``, the in-release modules importable as ``wb_upstream.runtime.*`` and
    ``wb_upstream.in_release.*`` by their own relative imports."""
    return REGISTER + f"import sys\nsys.path[:0] = {list(first)!r}\nwb_register({str(UPSTREAM)!r}, 'runtime')\n"


def runtime_config(**changes: object) -> dict:
    """A real-runtime run's whole configuration as ``run_runtime`` resolves it (0.5.14, dp 2, triton, its
    defaults), with ``changes``: the input of ``release_record.new`` in the record tests."""
    cfg = {
        "sglang": "0.5.14",
        "sglang_src": None,
        "dp": 2,
        "backend": "triton",
        "fixes": [],
        "steps": 3,
        "topk": 1,
        "draft_tokens": 4,
        "max_new_tokens": 8,
        "draft_backend": "triton",
        "revision": "sglang 0.5.14",
        "apply_fix_in_place": False,
        "mode": "real-runtime",
        "model_dir": "models",
        "seed": 0,
        "prompts": ["Hi"],
        "disable_overlap_schedule": False,
        "timeout_s": 300.0,
    }
    return {**cfg, **changes}
