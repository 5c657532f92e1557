"""``--fix llama-attn-tp``: the EAGLE-1 draft's Llama attention split within the attention-TP group (the DP 3
``ZeroDivisionError`` in the triton decode kernel), on a stand-in ``sglang.srt.models.llama`` (no torch), and
the report's diff made from the same edits; and a rank's wait for its requests (the mid-idle point counted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from upstream_fixtures import in_release

from workbench.upstream.runtime import fixes, report

# A stand-in for 0.5.23's models/llama.py: LlamaAttention.__init__ with the release's three lines the fix edits
# (the head split's TP size and the two projections' prefixes), its assert and its zero-argument super().
LLAMA_STAND_IN = """
import types

PARALLEL = types.SimpleNamespace(tp_size=3, attn_tp_size=1)  # DP attention: TP 3, attention TP 1


def get_parallel():
    return PARALLEL


def add_prefix(name, prefix):
    return f"{prefix}.{name}" if prefix else name


class QKVParallelLinear:
    def __init__(self, hidden_size, head_dim, heads, kv_heads, bias=False, prefix="", parallel_group="tp"):
        self.prefix, self.parallel_group = prefix, parallel_group


class RowParallelLinear:
    def __init__(self, input_size, output_size, bias=False, reduce_results=True, prefix="", parallel_group="tp"):
        self.prefix, self.parallel_group = prefix, parallel_group


class Module:
    def __init__(self):
        self.module_init = True


class LlamaAttention(Module):
    def __init__(self, num_heads, num_kv_heads, prefix=""):
        super().__init__()
        tp_size = get_parallel().tp_size
        self.total_num_heads = num_heads
        assert self.total_num_heads % tp_size == 0
        self.num_heads = self.total_num_heads // tp_size
        self.num_kv_heads = max(1, num_kv_heads // tp_size)
        self.qkv_proj = QKVParallelLinear(
            128,
            32,
            num_heads,
            num_kv_heads,
            prefix=add_prefix("qkv_proj", prefix),
        )
        self.o_proj = RowParallelLinear(
            num_heads * 32,
            128,
            prefix=add_prefix("o_proj", prefix),
        )
"""

SCRIPT = """
{boot}from wb_upstream.runtime import fixes
from sglang.srt.models import llama


def build(heads, kv):
    try:
        a = llama.LlamaAttention(heads, kv, prefix="layers.0")
    except AssertionError:
        return "AssertionError"
    return (a.module_init, a.num_heads, a.num_kv_heads, a.qkv_proj.parallel_group, a.o_proj.parallel_group,
            a.qkv_proj.prefix, a.o_proj.prefix)


before = [build(6, 3), build(4, 2)]
out = fixes.apply(["llama-attn-tp"])
again = fixes.apply(["llama-attn-tp"])
after = [build(6, 3), build(4, 2)]
qualname = llama.LlamaAttention.__init__.__qualname__
print(repr((before, out, again, after, fixes.changes(out), fixes.changes(again), qualname)))
"""


def test_the_fix_splits_the_llama_heads_within_attention_tp(tmp_path: Path) -> None:
    """Before: 6 q / 3 kv heads at TP 3 give 2 q heads and 1 kv head per rank (the pool, on attention TP 1, holds 3),
    and 4 heads stop at the assert; after: the heads and both projections on the attention-TP group, the method's
    own super() and prefixes kept; applied once, its change listed for the shim guard."""
    for sub in ("sglang", "sglang/srt", "sglang/srt/models"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub / "__init__.py").write_text("")
    (tmp_path / "sglang/srt/models/llama.py").write_text(LLAMA_STAND_IN)
    script = SCRIPT.format(boot=in_release(str(tmp_path)))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, applied, again, after, changes, changes_again, qualname = eval(out.stdout)  # noqa: S307
    assert before == [(True, 2, 1, "tp", "tp", "layers.0.qkv_proj", "layers.0.o_proj"), "AssertionError"]
    assert after == [
        (True, 6, 3, "attn_tp", "attn_tp", "layers.0.qkv_proj", "layers.0.o_proj"),
        (True, 4, 2, "attn_tp", "attn_tp", "layers.0.qkv_proj", "layers.0.o_proj"),
    ]
    assert applied[0]["applied"] is True and again[0]["applied"] is False
    assert "already" in again[0]["note"] and qualname == "LlamaAttention.__init__"
    assert [(c["module"], c["name"]) for c in changes] == [("sglang.srt.models.llama", "LlamaAttention.__init__")]
    assert changes_again == []


def test_the_edits_need_each_line_once() -> None:
    """A method without one of the edited lines, or with it twice, is named, not half-edited."""
    method = LLAMA_STAND_IN[LLAMA_STAND_IN.index("    def __init__(self, num_heads") :]
    fixed = fixes.attn_tp_source(method)
    assert "tp_size = get_parallel().attn_tp_size\n" in fixed and fixed.count('parallel_group="attn_tp",') == 2
    with pytest.raises(ValueError, match="'tp_size = get_parallel\\(\\).tp_size' is there 0 time"):
        fixes.attn_tp_source(fixed)
    twice = method + '            prefix=add_prefix("o_proj", prefix),\n'
    with pytest.raises(ValueError, match="o_proj.*is there 2 time"):
        fixes.attn_tp_source(twice)


def test_the_report_diff_is_the_same_edits_in_the_file() -> None:
    """The report's fix edits only ``LlamaAttention.__init__`` of the file, and a fixed file has nothing to fix."""
    text = "import os\n\n\nclass Other:\n    def __init__(self):\n        tp_size = get_parallel().tp_size\n"
    text += LLAMA_STAND_IN
    after = report.attn_tp_fixed_text(text)
    diff = report.unified_diff(text, after, report.LLAMA_FILE)
    assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        "-        tp_size = get_parallel().tp_size",
        "+        tp_size = get_parallel().attn_tp_size",
        '+            parallel_group="attn_tp",',
        '+            parallel_group="attn_tp",',
    ]
    assert after.count("tp_size = get_parallel().tp_size") == 1  # Other.__init__'s, outside the method
    with pytest.raises(report.ReportError, match="nothing to fix"):
        report.attn_tp_fixed_text(after)


def test_a_rank_waits_for_its_requests_without_reading_them() -> None:
    """The mid-idle point counted, not timed: a rank starts its event loop once its scheduler's request socket holds
    its requests (the wait reads nothing: the scheduler still receives them), at most the limit; a scheduler
    without that socket is not waited for."""
    import types

    import zmq

    from workbench.upstream.runtime.release_rank import await_requests

    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    try:
        pull.bind("inproc://requests")
        push.connect("inproc://requests")
        scheduler = types.SimpleNamespace(recv_from_tokenizer=pull)
        assert await_requests(scheduler, limit_s=0.05) >= 0.05  # nothing sent: the limit
        push.send(b"request p0")
        assert await_requests(scheduler, limit_s=5) < 5
        channels = types.SimpleNamespace(ipc_channels=types.SimpleNamespace(recv_from_tokenizer=pull))
        assert await_requests(channels, limit_s=5) < 5  # 0.5.13 and 0.5.14 keep the socket there
        assert pull.recv(flags=zmq.NOBLOCK) == b"request p0"
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        ctx.term()
    assert await_requests(types.SimpleNamespace(), limit_s=5) is None
    assert await_requests(types.SimpleNamespace(recv_from_tokenizer=None), limit_s=5) is None
