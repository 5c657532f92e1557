"""Small synthetic sglang trees for the offline upstream tests (no network, no release sources)."""

from __future__ import annotations

import json
import textwrap
import time
import zipfile
from pathlib import Path

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
