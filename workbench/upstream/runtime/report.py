"""Upstream-ready reports of the crashes the real runtime confirmed end to end: what to send to SGLang.

    python -m workbench.upstream.runtime.report --sglang 0.5.23 --out workbench/assets/upstream_reports
    python -m workbench.upstream.runtime.report --sglang 0.5.23 --crash eagle-idle-draft-extend-empty-batch --out DIR

For each crash in ``CRASHES`` (all, or the ones ``--crash`` names) it runs the release three times on this
CPU (as released: the crash; on a checkout of the release with the smallest fix applied to its source file:
the fixed run; the comparison run, DP 1) and writes one folder, ``<name>-<release>``:

- ``README.md``: the crash (rank, pass, forward mode, batch size, file:line), the GPU server command that
  reaches it (not run on a GPU by the workbench), and each claim about which flags make the pass run eagerly
  and reach the line, with the release's lines (found in the release's files by their code when the report is
  written; a claim whose code is not there once stops the report);
- ``traceback.txt``: the crashing rank's traceback, paths below the package root;
- ``fix.diff``: the smallest fix, a unified diff against the release's file (``patch -p1`` in the folder
  holding ``sglang/``); the fixed run ran that very text;
- ``result.json``: how the three runs ended (``status``, the crash), the fixed run's equality to HF
  transformers and to the comparison run, the commands, the date, the workbench commit.

A crash whose fixed run meets another crash first carries that crash's fix too: as a checkout change
(``with_reports``: the other folder's diff, in the fixed and the comparison run) or as a real-runtime
``--fix`` (``with_fixes``); the README names them.

Exit codes: 0 written and every fix made its run ok and equal to HF and to the comparison run; 1 a release
did not crash as its report says, or a fixed run was not ok and equal; 2 a bad argument or a missing claim
line.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import difflib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workbench.run.provenance import workbench_commit
from workbench.run.serialise import from_dict
from workbench.upstream.context import UpstreamContext, echo
from workbench.upstream.sources.releases import check_versions
from workbench.upstream.sources.trees import release_tree

from .fixes import ATTN_TP_TEST, attn_tp_source
from .release_record import RuntimeRecord
from .release_run import run_runtime

MAX_NEW_TOKENS = 16
SHIPPED_REPORTS = Path(__file__).resolve().parents[2] / "assets" / "upstream_reports"
CLIENT_COMMAND = (
    "curl -s localhost:30000/generate -H 'Content-Type: application/json' "
    '-d \'{"text": "def fibonacci(n):", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}\''
)
_SPEC = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
_LAUNCH = "python -m sglang.launch_server --model-path TARGET"
# The claims that graphs off make an idle DP rank's pass run eagerly: (claim, file under sglang/, the code that
# backs it, the function it is in ("Class.method" for a method) or None). Line numbers are read from the release.
EAGER_IDLE_CLAIMS = (
    (
        "`--disable-cuda-graph` is still accepted (deprecated) and sets `disable_cuda_graph`",
        "srt/server_args.py",
        '"--disable-cuda-graph",',
        None,
    ),
    (
        "resolving the graph config, `disable_cuda_graph` sets the DECODE (and PREFILL) backend to DISABLED",
        "srt/arg_groups/cuda_graph_hook.py",
        "if cfg.disable_cuda_graph:",
        "parse_cuda_graph_config",
    ),
    (
        "with DECODE disabled on a GPU, `capture_decode_graph` captures nothing (its runner is None)",
        "srt/model_executor/model_runner_components/cuda_graph_setup.py",
        'if model_runner.device != "cpu" and check_cuda_graph_backend(',
        "capture_decode_graph",
    ),
    (
        "the model runner keeps that runner as `decode_cuda_graph_runner`",
        "srt/model_executor/model_runner.py",
        "self.decode_cuda_graph_runner = capture.decode.runner",
        None,
    ),
    (
        "`can_run_graph` needs that runner (`mode_check() and self.decode_cuda_graph_runner and ...`): False",
        "srt/model_executor/model_runner.py",
        "can_run_graph = bool(",
        "_forward_raw",
    ),
    (
        "so the idle rank's IDLE batch goes to the eager runner",
        "srt/model_executor/model_runner.py",
        "ret = self.eager_runner.execute(",
        "_forward_raw",
    ),
    (
        "which sends an IDLE batch to `_execute_idle`",
        "srt/model_executor/runner/eager_runner.py",
        "return self._execute_idle(forward_batch, pp_proxy_tensors)",
        "execute",
    ),
)
DP_ATTENTION_CLAIM = (
    "`--enable-dp-attention` is still accepted (deprecated): DP attention, whose MLP sync pads the idle rank",
    "srt/server_args.py",
    '"--enable-dp-attention",',
    None,
)
DP_ATTENTION_OWN_BATCH = (
    "`--enable-dp-attention` is still accepted (deprecated): DP attention, each DP rank running its own batch",
    *DP_ATTENTION_CLAIM[1:],
)
TORCH_NATIVE_CLAIMS = (
    (
        "`--attention-backend torch_native` turns CUDA graphs off (DECODE and PREFILL), so every forward is eager",
        "srt/arg_groups/attention_hook.py",
        'if attention_backend == "torch_native":',
        "handle_attention_backend_compatibility",
    ),
    (
        "EAGLE's draft has no torch_native backend (`EAGLE is not supported in decode attention backend ...`): "
        "the draft needs `--speculative-draft-attention-backend`, a server argument",
        "srt/speculative/draft_utils.py",
        "raise ValueError(error_template.format(backend_type=backend_type))",
        "DraftBackendFactory._create_backend",
    ),
    (
        "the draft runner takes that argument's backend",
        "srt/model_executor/model_runner.py",
        "return draft_attention_backend or get_spec().speculative_draft_attention_backend",
        None,
    ),
    (
        "the argument `speculative_draft_attention_backend` (CLI `--speculative-draft-attention-backend`)",
        "srt/arg_groups/fields/spec.py",
        "speculative_draft_attention_backend: A[",
        None,
    ),
    (
        "EAGLE's server-argument handler refuses an attention backend only here (top-k > 1 with page size > 1) and "
        "for trtllm_mha at top-k > 1: torch_native at top-k 1 passes",
        "srt/arg_groups/speculative_hook.py",
        '_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")',
        "_handle_eagle_family",
    ),
)


@dataclass(frozen=True)
class Crash:
    """One crash's report: the runs that reach and fix it, the fix as a source change, the GPU command and claims."""

    name: str  # the folder is <name>-<release>
    title: str  # README's heading (``{release}`` filled in)
    summary: str  # README's first paragraph, how the pass reaches the line
    fix: tuple[tuple[str, Callable[[str], str]], ...]  # (release file ``sglang/...``, its text -> fixed text)
    fix_note: str  # README: what the diff does
    run: dict  # run_runtime's arguments that reach the crash (the release as shipped)
    dp1: dict  # the comparison run's arguments
    expect: dict  # the crash: phase, forward_mode, exception_type, raised_file (and spec_info when named)
    key: str
    server_command: str
    claims: tuple
    gpu_note: str  # README: what the command needs on GPUs, and what is not checked
    with_reports: tuple = ()  # other crashes' diffs applied in the fixed and the comparison checkouts
    with_fixes: tuple = field(default_factory=tuple)  # real-runtime --fix names added to the fixed run
    extra: tuple = ()  # README paragraphs after the fix (e.g. the upstream thread)
    acceptance: bool = False  # README: the fixed and the comparison runs' draft acceptance (a draft-side fix)


class ReportError(ValueError):
    """A claim whose code is not in the release, or a file without the code to fix (exit 2)."""


def _function_span(tree: ast.AST, within: str) -> list[ast.AST]:
    """The function ``within`` (``name`` or ``Class.name``) in ``tree``."""
    cls_name, _, fn = within.rpartition(".")
    scope: list[ast.AST] = [tree]
    if cls_name:
        scope = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls_name]
    return [
        n
        for s in scope
        for n in (s.body if cls_name else ast.walk(s))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn
    ]


def claim_lines(pkg: Path, claims: tuple | None = None) -> list[dict]:
    """Each claim (default: the verify crash's, ``CLAIMS``) with ``sglang/<file>:<line>`` of its code in the
    package folder ``pkg``."""
    out = []
    for claim, rel, code, within in _claims(claims):
        path = pkg / rel
        text = path.read_text() if path.is_file() else ""
        lines = text.splitlines()
        span = (1, len(lines))
        if within is not None:
            defs = _function_span(ast.parse(text), within)
            if len(defs) != 1:
                raise ReportError(f"claim {claim!r}: sglang/{rel} defines {len(defs)} function(s) {within}")
            span = (defs[0].lineno, defs[0].end_lineno)
        found = [i for i, line in enumerate(lines, 1) if code in line and span[0] <= i <= span[1]]
        if len(found) != 1:
            where = f"sglang/{rel}" + (f" {within}()" if within else "")
            raise ReportError(f"claim {claim!r}: {code!r} is in {where} {len(found)} time(s), not once")
        out.append({"claim": claim, "lines": [f"sglang/{rel}:{found[0]}"], "code": code})
    return out


def _claims(claims: tuple | None) -> tuple:
    return CLAIMS if claims is None else claims


def _insert(text: str, at: int, block: tuple[str, ...]) -> str:
    """``block``'s lines inserted after line ``at`` (1-based) of ``text``."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:at] + [line + "\n" for line in block] + lines[at:])


def _method(text: str, file: str, qualname: str) -> ast.FunctionDef:
    defs = _function_span(ast.parse(text), qualname)
    if len(defs) != 1:
        raise ReportError(f"{file} defines {len(defs)} method(s) {qualname}")
    return defs[0]


# The verify crash: kv_indptr declared on EagleVerifyInput.
SPEC_FILE = "sglang/srt/speculative/eagle_info.py"
CLASS, FIELD = "EagleVerifyInput", "kv_indptr"
FIELD_LINES = (
    "    # None on an idle DP rank's verify input: the attention backends rebuild the metadata from seq_lens.",
    "    kv_indptr: Optional[torch.Tensor] = None",
)


def fixed_text(text: str) -> str:
    """``text`` (the release's eagle_info.py) with ``kv_indptr`` declared last in ``EagleVerifyInput``'s fields."""
    tree = ast.parse(text)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS), None)
    if cls is None:
        raise ReportError(f"{SPEC_FILE} has no class {CLASS}")
    fields = [n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    if any(n.target.id == FIELD for n in fields):
        raise ReportError(f"{CLASS} already declares {FIELD}: nothing to fix")
    return _insert(text, fields[-1].end_lineno, FIELD_LINES)


# The EAGLE-1 draft's empty idle batch: LlamaAttention skips a batch of 0 rows.
LLAMA_FILE = "sglang/srt/models/llama.py"
LLAMA_GUARD = (
    "        if hidden_states.shape[0] == 0:  # an idle DP rank's empty batch: nothing to attend, rows unchanged",
    "            return hidden_states",
)


def llama_fixed_text(text: str) -> str:
    """``text`` (the release's models/llama.py) with ``LlamaAttention.forward`` returning an empty batch as is."""
    fn = _method(text, LLAMA_FILE, "LlamaAttention.forward")
    if "hidden_states.shape[0] == 0" in ast.get_source_segment(text, fn):
        raise ReportError("LlamaAttention.forward already skips an empty batch: nothing to fix")
    return _insert(text, fn.body[0].lineno - 1, LLAMA_GUARD)


EAGLE_FILE = "sglang/srt/models/llama_eagle.py"
EMBED_CALL = (
    "        self.embed_tokens = VocabParallelEmbedding(\n"
    "            config.vocab_size,\n"
    "            config.hidden_size,\n"
)
EMBED_IMPORT = "from sglang.srt.layers.logits_processor import LogitsProcessor\n"


def eagle_embedding_fixed_text(text: str) -> str:
    """``text`` (models/llama_eagle.py) whose draft embedding reduces within the attention-TP group under DP
    attention (``use_attn_tp_group=is_dp_attention_enabled()``, as ``qwen2.Qwen2Model`` builds its own)."""
    if "use_attn_tp_group" in text:
        raise ReportError("llama_eagle.py already builds its embedding on the attention-TP group: nothing to fix")
    for code in (EMBED_CALL, EMBED_IMPORT):
        if text.count(code) != 1:
            raise ReportError(f"{EAGLE_FILE}: {code.strip()!r} is there {text.count(code)} time(s), not once")
    text = text.replace(EMBED_CALL, EMBED_CALL + "            use_attn_tp_group=is_dp_attention_enabled(),\n")
    return text.replace(
        EMBED_IMPORT, "from sglang.srt.layers.dp_attention import is_dp_attention_enabled\n" + EMBED_IMPORT
    )


def attn_tp_fixed_text(text: str) -> str:
    """``text`` (models/llama.py) whose ``LlamaAttention.__init__`` splits its heads and builds its qkv/o
    projections within the attention-TP group (``fixes.attn_tp_source``, the edits ``--fix llama-attn-tp`` makes)."""
    fn = _method(text, LLAMA_FILE, "LlamaAttention.__init__")
    lines = text.splitlines(keepends=True)
    method = "".join(lines[fn.lineno - 1 : fn.end_lineno])
    if ATTN_TP_TEST in method:
        raise ReportError("LlamaAttention.__init__ already splits its heads within attention TP: nothing to fix")
    try:
        fixed = attn_tp_source(method)
    except ValueError as exc:
        raise ReportError(f"{LLAMA_FILE}: {exc}") from exc
    return "".join(lines[: fn.lineno - 1]) + fixed + "".join(lines[fn.end_lineno :])


# torch_native under DP attention: the padding fill value defined.
TORCH_NATIVE_FILE = "sglang/srt/layers/attention/torch_native_backend.py"
FILL_VALUE_LINES = (
    "",
    "    def get_cuda_graph_seq_len_fill_value(self):",
    "        # The seq_len of a DP-padded row; eager DP padding asks for it on every device but the CPU.",
    "        return 1",
)


def fill_value_fixed_text(text: str) -> str:
    """``text`` (torch_native_backend.py) with ``get_cuda_graph_seq_len_fill_value`` defined (1, as triton's)."""
    if "def get_cuda_graph_seq_len_fill_value" in text:
        raise ReportError("TorchNativeAttnBackend already defines get_cuda_graph_seq_len_fill_value: nothing to fix")
    fn = _method(text, TORCH_NATIVE_FILE, "TorchNativeAttnBackend.init_forward_metadata")
    return _insert(text, fn.end_lineno, FILL_VALUE_LINES)


# torch_native's TARGET_VERIFY: the verify batch's lens and tree mask, which it carries in its spec input.
VERIFY_LENS = (
    "        seq_lens = forward_batch.seq_lens",
    "        prefix_lens, extend_lens = forward_batch.extend_prefix_lens, forward_batch.extend_seq_lens",
    "        custom_mask = None",
    "        if forward_batch.forward_mode.is_target_verify():",
    "            # A verify batch carries no extend lens: each request's draft tokens follow its seq_lens",
    "            # tokens (req_to_token holds their slots), and attend as the spec input's tree mask says.",
    "            spec_info = forward_batch.spec_info",
    "            prefix_lens = seq_lens",
    "            extend_lens = torch.full_like(seq_lens, spec_info.draft_token_num)",
    "            seq_lens = seq_lens + spec_info.draft_token_num",
    "            custom_mask = spec_info.custom_mask",
    "",
)
VERIFY_MASK = (
    "            if custom_mask is not None:",
    "                # Verify: the draft rows' mask over all kv (the tree); the rows before them stay causal.",
    "                n, kv = int(extend_seq_len_q), int(seq_len_kv)",
    "                rows = custom_mask[mask_start : mask_start + n * kv].view(n, kv)",
    "                attn_mask = torch.ones(kv, kv, dtype=torch.bool, device=rows.device).tril()",
    "                attn_mask[kv - n :] = rows",
    "                is_causal = False",
    "                mask_start += n * kv",
)


def _line_of(lines: list[str], code: str, span: tuple[int, int], what: str) -> int:
    """The one line (1-based) in ``span`` holding ``code``; ReportError unless there is exactly one."""
    found = [i for i in range(span[0], span[1] + 1) if code in lines[i - 1]]
    if len(found) != 1:
        raise ReportError(f"{TORCH_NATIVE_FILE} {what}: {code.strip()!r} is there {len(found)} time(s), not once")
    return found[0]


def verify_fixed_text(text: str) -> str:
    """``text`` (torch_native_backend.py) whose ``forward_extend`` runs a TARGET_VERIFY batch: its lens from
    ``seq_lens`` and the spec input's ``draft_token_num``, its tree mask from the spec input's ``custom_mask``."""
    if "is_target_verify" in text:
        raise ReportError("torch_native_backend.py already tests is_target_verify: nothing to fix")
    lines = text.splitlines(keepends=True)
    ext = _method(text, TORCH_NATIVE_FILE, "TorchNativeAttnBackend.forward_extend")
    call = next(
        n
        for n in ast.walk(ext)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "_run_sdpa_forward_extend"
    )
    run = _method(text, TORCH_NATIVE_FILE, "TorchNativeAttnBackend._run_sdpa_forward_extend")
    sdpa = next(
        n.lineno
        for n in ast.walk(run)
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "per_req_out_redudant" for t in n.targets)
    )
    span, call_span = (run.lineno, run.end_lineno), (call.lineno, call.end_lineno)
    params = _line_of(lines, "sliding_window_size: Optional[int] = None,", (run.lineno, run.body[0].lineno), "params")
    loop = _line_of(lines, "start_q, start_kv = 0, 0", span, "its loop")
    args = [_line_of(lines, f"forward_batch.{f},", call_span, "the call") for f in ("seq_lens", "extend_prefix_lens")]
    args.append(_line_of(lines, "forward_batch.extend_seq_lens,", call_span, "the call"))
    # (line, replace it or insert after it, lines), bottom up: each edit leaves the line numbers above it as they were.
    renamed = ((args[2], "extend_seq_lens", "extend_lens"), (args[1], "extend_prefix_lens", "prefix_lens"))
    edits = [
        (call.end_lineno - 1, False, ("            custom_mask=custom_mask,",)),
        *((at, True, (lines[at - 1].replace(f"forward_batch.{a}", b).rstrip("\n"),)) for at, a, b in renamed),
        (args[0], True, (lines[args[0] - 1].replace("forward_batch.seq_lens", "seq_lens").rstrip("\n"),)),
        (call.lineno - 1, False, VERIFY_LENS),
        (sdpa - 1, False, (*VERIFY_MASK, "")),
        (loop, True, ("        start_q, start_kv, mask_start = 0, 0, 0",)),
        (params, False, ("        custom_mask: Optional[torch.Tensor] = None,",)),
    ]
    for at, replace, block in edits:
        lines[at - 1 if replace else at : at] = [line + "\n" for line in block]
    return "".join(lines)


VERIFY_KV_INDPTR = Crash(
    name="triton-idle-verify-kv-indptr",
    title="`EagleVerifyInput.kv_indptr` read on an idle DP rank's verify pass, sglang {release}",
    summary="The idle rank (rank {rank}) of DP attention crashes in the EAGLE **{phase}** pass: its padded\n"
    "{forward_mode} batch (batch size {batch_size}) carries the `{spec_info}` the V2 worker installs, and\n"
    "`TritonAttnBackend.init_forward_metadata` reads its `kv_indptr`, which the class does not declare:",
    fix=((SPEC_FILE, fixed_text),),
    fix_note="`fix.diff` (`patch -p1` in the folder holding `sglang/`) declares `kv_indptr: Optional[torch.Tensor] = "
    "None` on\n`EagleVerifyInput`, as PR #28221 did on `EagleDraftExtendInput`: the backend's `spec_info.kv_indptr "
    "is None` test then\ntakes its seq_lens branch.",
    run={"dp": 2},
    dp1={"dp": 1},
    expect={"spec_info": CLASS, "phase": "verify", "forward_mode": "IDLE", "exception_type": "AttributeError"},
    key=f"triton|IDLE|{CLASS}|{FIELD}|TritonAttnBackend.init_forward_metadata",
    server_command=f"{_LAUNCH} --speculative-algorithm EAGLE3 --speculative-draft-model-path EAGLE3_HEAD {_SPEC} "
    "--tp-size 2 --dp-size 2 --enable-dp-attention --attention-backend triton --disable-cuda-graph",
    claims=EAGER_IDLE_CLAIMS
    + (
        (
            "which, for a padded idle batch (DP attention pads it: batch size > 0), calls `init_forward_metadata`",
            "srt/model_executor/runner/eager_runner.py",
            "model_runner.attn_backend.init_forward_metadata(forward_batch)",
            "_execute_idle",
        ),
        DP_ATTENTION_CLAIM,
        (
            "with graphs on, a batch the decode graph runner can run is replayed here and returns before the eager "
            "path and its `init_forward_metadata` call",
            "srt/model_executor/model_runner.py",
            "ret = self.decode_cuda_graph_runner.execute(",
            "_forward_raw",
        ),
    ),
    gpu_note="One request leaves rank 1 idle. The table's last row is the other side: with CUDA graphs on, such a "
    "batch does not reach the eager\n`init_forward_metadata` (whether the graph path reads the field is not checked "
    "here). `TARGET` and\n`EAGLE3_HEAD`: a target model and its EAGLE3 draft head (the CPU measurement used a tiny "
    "Qwen3 target and an EAGLE3 head that\nsglang loads as `LlamaForCausalLMEagle3`).",
)

EAGLE_IDLE_EMPTY = Crash(
    name="eagle-idle-draft-extend-empty-batch",
    title="EAGLE (EAGLE-1) draft: an idle DP rank's empty draft-extend batch reaches the Llama rotary, "
    "sglang {release}",
    summary="The idle rank (rank {rank}) of DP attention crashes in the EAGLE **{phase}** pass: its {forward_mode} "
    "batch of\n{batch_size} rows goes through the EAGLE-1 draft (`llama_eagle.LlamaModel`, which has no empty-batch "
    "guard; `llama_eagle3`\nhas one), whose Llama layer's attention applies the rotary embedding, and "
    "`query.view(num_tokens, -1, head_size)`\ncannot infer `-1` for 0 rows:",
    fix=((LLAMA_FILE, llama_fixed_text), (EAGLE_FILE, eagle_embedding_fixed_text)),
    fix_note="`fix.diff` (`patch -p1` in the folder holding `sglang/`) makes two changes. `LlamaAttention.forward` "
    "returns an\nempty batch as it came (0 rows: nothing to attend), so the decoder layer skips only the attention, "
    "as\n`Qwen3DecoderLayer.forward` does (`if hidden_states.shape[0] != 0:`); the layer's stage boundaries still run "
    "on\nthe idle rank. And `llama_eagle.LlamaModel` builds its embedding with "
    "`use_attn_tp_group=is_dp_attention_enabled()`,\nas `qwen2.Qwen2Model` does: past the rotary, the busy rank's "
    "draft embedding all-reduced over the full TP\ngroup while the idle rank's empty batch skipped that collective "
    "(`VocabParallelEmbedding.forward` skips it for an\nempty batch, which only attention-TP peers may), so the busy "
    "rank's all-reduce met the idle rank's next collective\n(gloo aborted the idle rank: `op.preamble.length <= "
    "op.nbytes. 20480 vs 128`; with `TORCH_DISTRIBUTED_DEBUG=DETAIL` the first\nshapes that differ are rank 0's "
    "FFN sum [160, 128] against rank 1's logits gather [1, 128], one collective\napart; a trace of each rank's "
    "all-reduces put the extra one at rank 0's draft embedding). The first change alone\nwas tried end to end "
    "first and ended so.",
    run={"dp": 2, "algorithm": "EAGLE"},
    dp1={"dp": 1, "algorithm": "EAGLE"},
    expect={
        "phase": "draft-extend",
        "forward_mode": "IDLE",
        "exception_type": "RuntimeError",
        "raised_file": "sglang/srt/layers/rotary_embedding/base.py",
    },
    key="triton|IDLE|EagleDraftExtendInput|LlamaAttention.forward|rotary view of 0 rows",
    server_command=f"{_LAUNCH} --speculative-algorithm EAGLE --speculative-draft-model-path EAGLE_HEAD {_SPEC} "
    "--tp-size 2 --dp-size 2 --enable-dp-attention --attention-backend triton --disable-cuda-graph",
    claims=EAGER_IDLE_CLAIMS
    + (
        (
            "which, for an idle batch of 0 rows, drops the metadata and runs the model's forward",
            "srt/model_executor/runner/eager_runner.py",
            "return model_runner.model.forward(",
            "_execute_idle",
        ),
        (
            "with DECODE disabled the EAGLE worker captures no draft graphs either (draft and draft-extend eager)",
            "srt/speculative/eagle_worker_v2.py",
            "if _is_cpu or check_cuda_graph_backend(Phase.DECODE, Backend.DISABLED):",
            "_capture_cuda_graphs",
        ),
        DP_ATTENTION_OWN_BATCH,
        (
            "the EAGLE-1 draft runs its layers on any batch, an empty one included",
            "srt/models/llama_eagle.py",
            "for layer in self.layers:",
            "LlamaModel.forward",
        ),
        (
            "(the EAGLE3 draft returns before its layers on an empty batch)",
            "srt/models/llama_eagle3.py",
            "if hidden_states.shape[0] == 0:",
            "LlamaModel.forward",
        ),
        (
            "the Llama decoder layer calls its attention on any batch",
            "srt/models/llama.py",
            "hidden_states = self.self_attn(",
            "LlamaDecoderLayer.forward",
        ),
        (
            "(Qwen3's decoder layer skips the attention of an empty batch and keeps its boundaries)",
            "srt/models/qwen3.py",
            "if hidden_states.shape[0] != 0:",
            "Qwen3DecoderLayer.forward",
        ),
        (
            "the attention applies the rotary embedding",
            "srt/models/llama.py",
            "q, k = self.rotary_emb(positions, q, k)",
            "LlamaAttention.forward_prepare_native",
        ),
        (
            "on CUDA, a head size of 64, 128, 256 or 512 does not use the fallback kernel",
            "srt/layers/rotary_embedding/base.py",
            "(not (_is_cuda) or self.head_size not in [64, 128, 256, 512])",
            "RotaryEmbedding.__init__",
        ),
        (
            "so `forward_cuda` views the query with `-1` heads, which 0 rows cannot infer (CPU: `forward_native`)",
            "srt/layers/rotary_embedding/base.py",
            "q_rope = query.view(batch_size, -1, self.head_size)",
            "RotaryEmbedding.forward_cuda",
        ),
        (
            "(second change) the EAGLE-1 draft builds its embedding without `use_attn_tp_group`: full-TP reduction",
            "srt/models/llama_eagle.py",
            "self.embed_tokens = VocabParallelEmbedding(",
            "LlamaModel.__init__",
        ),
        (
            "whose forward skips the all-reduce for an empty batch (on every device)",
            "srt/layers/vocab_parallel_embedding.py",
            "output_parallel.numel() > 0",
            "VocabParallelEmbedding.forward",
        ),
        (
            "and otherwise reduces over the full TP group, where the busy DP rank waits for the idle one",
            "srt/layers/vocab_parallel_embedding.py",
            "output_parallel = tensor_model_parallel_all_reduce(output_parallel)",
            "VocabParallelEmbedding.forward",
        ),
        (
            "(Qwen2/Qwen3's embedding reduces within the attention-TP group under DP attention)",
            "srt/models/qwen2.py",
            "use_attn_tp_group=is_dp_attention_enabled(),",
            "Qwen2Model.__init__",
        ),
    ),
    gpu_note="One request leaves rank 1 idle; its first idle pass is the draft-extend after the prefill "
    "(`_draft_extend_for_prefill`),\nwith 0 rows on this CPU. `TARGET` and `EAGLE_HEAD`: a Llama-family target and its "
    "EAGLE-1 draft head, which sglang loads\nas `LlamaForCausalLMEagle` (the CPU measurement used a tiny Qwen3 "
    "target, whose layers carry the DP-attention\ngathers, and an EAGLE-1 head of head size 32, which takes "
    "`forward_native`'s same view). Whether DP attention pads\nthat batch to 0 rows on GPUs as it does here is not "
    "checked.",
    with_fixes=("verify-input",),
)

TORCH_NATIVE_VERIFY = Crash(
    name="torch-native-verify-extend-prefix-lens",
    title="torch_native + EAGLE: the first verify pass dereferences `extend_prefix_lens` (None), sglang {release}",
    summary="Rank {rank} crashes in the EAGLE **{phase}** pass: its {forward_mode} batch (batch size {batch_size}) "
    "reaches\n`TorchNativeAttnBackend.forward_extend`, which passes `forward_batch.extend_prefix_lens` to "
    "`_run_sdpa_forward_extend`;\n`ForwardBatch.init_new` leaves that field None for a verify batch (its positions "
    "come from `seq_lens`):",
    fix=((TORCH_NATIVE_FILE, verify_fixed_text),),
    fix_note="`fix.diff` (`patch -p1` in the folder holding `sglang/`) makes `forward_extend` run a TARGET_VERIFY "
    "batch: the\nprefix is `seq_lens`, each request's draft tokens (`spec_info.draft_token_num`) follow it, and the "
    "draft rows attend\nas the spec input's `custom_mask` says (the FULL_MASK layout: draft rows x all kv, requests "
    "back to back). The\nCPU run is a chain (top-k 1), where that mask is causal; a tree (top-k > 1) is not run here.",
    run={"dp": 1, "backend": "torch_native"},
    dp1={"dp": 1},
    expect={
        "phase": "verify",
        "forward_mode": "TARGET_VERIFY",
        "exception_type": "AttributeError",
        "raised_file": TORCH_NATIVE_FILE,
    },
    key="torch_native|TARGET_VERIFY|forward_batch|extend_prefix_lens|TorchNativeAttnBackend.forward_extend",
    server_command=f"{_LAUNCH} --speculative-algorithm EAGLE3 --speculative-draft-model-path EAGLE3_HEAD {_SPEC} "
    "--attention-backend torch_native --speculative-draft-attention-backend triton",
    claims=TORCH_NATIVE_CLAIMS
    + (
        (
            "a verify batch takes the decode-or-verify positions branch, so the extend lens are not set",
            "srt/model_executor/forward_batch_info.py",
            "if ret.forward_mode.is_decode() or ret.forward_mode.is_target_verify():",
            "ForwardBatch.init_new",
        ),
        (
            "and keep the field's default, None",
            "srt/model_executor/forward_batch_info.py",
            "extend_prefix_lens: Optional[torch.Tensor] = None",
            None,
        ),
        (
            "the eager runner sends a TARGET_VERIFY batch (an extend mode) to `_execute_extend`",
            "srt/model_executor/runner/eager_runner.py",
            "return self._execute_extend(forward_batch, pp_proxy_tensors)",
            "execute",
        ),
        (
            "the attention backend's `forward` sends every mode but idle and decode to `forward_extend`",
            "srt/layers/attention/base_attn_backend.py",
            "return self.forward_extend(",
            "AttentionBackend.forward",
        ),
        (
            "torch_native's `forward_extend` hands `extend_prefix_lens` on",
            "srt/layers/attention/torch_native_backend.py",
            "forward_batch.extend_prefix_lens,",
            "TorchNativeAttnBackend.forward_extend",
        ),
        (
            "and dereferences it",
            "srt/layers/attention/torch_native_backend.py",
            "assert seq_lens.shape[0] == extend_prefix_lens.shape[0]",
            "TorchNativeAttnBackend._run_sdpa_forward_extend",
        ),
    ),
    gpu_note="One GPU, no DP: the first decode step's verify pass. `TARGET` and `EAGLE3_HEAD`: a target model and "
    "its EAGLE3\ndraft head. The code on the path has no device branch; the CPU run takes the same lines.",
    extra=(
        "Upstream: reported for NGRAM as sglang issue #36352 (open), whose open PRs #36361 and #36444 reject "
        "speculative\ndecoding with torch_native at startup instead; PR #36361 notes that every speculative "
        "algorithm reaches it.",
    ),
)

TORCH_NATIVE_FILL = Crash(
    name="torch-native-dp-fill-value",
    title="torch_native + DP attention: the first padded batch asks for an undefined fill value, sglang {release}",
    summary="Rank {rank} crashes in the EAGLE **{phase}** pass: its {forward_mode} batch (batch size {batch_size}) "
    "is padded for DP\nattention (`ForwardBatch.prepare_mlp_sync_batch` -> `_pad_inputs_to_size`), which asks the "
    "attention backend for\n`get_cuda_graph_seq_len_fill_value()`; `TorchNativeAttnBackend` inherits the base "
    "class's `raise NotImplementedError()`:",
    fix=((TORCH_NATIVE_FILE, fill_value_fixed_text),),
    fix_note="`fix.diff` (`patch -p1` in the folder holding `sglang/`) defines "
    "`TorchNativeAttnBackend.get_cuda_graph_seq_len_fill_value`\nreturning 1, the value the triton backend returns "
    "(a padded row's seq_len).",
    run={"dp": 2, "backend": "torch_native"},
    dp1={"dp": 1, "backend": "torch_native"},
    expect={
        "phase": "prefill",
        "exception_type": "NotImplementedError",
        "raised_file": "sglang/srt/layers/attention/base_attn_backend.py",
    },
    key="torch_native|DP padding|TorchNativeAttnBackend|get_cuda_graph_seq_len_fill_value",
    server_command=f"{_LAUNCH} --speculative-algorithm EAGLE3 --speculative-draft-model-path EAGLE3_HEAD {_SPEC} "
    "--tp-size 2 --dp-size 2 --enable-dp-attention --attention-backend torch_native "
    "--speculative-draft-attention-backend triton",
    claims=TORCH_NATIVE_CLAIMS
    + (
        DP_ATTENTION_CLAIM,
        (
            "the eager forward pads a DP-attention batch (MLP sync)",
            "srt/model_executor/model_runner.py",
            "forward_batch.prepare_mlp_sync_batch(self)",
            "_prepare_eager_forward_batch",
        ),
        (
            "whose padding takes the fill value from the backend (`_is_cpu` picks the CPU method; on CUDA this line)",
            "srt/model_executor/forward_batch_info.py",
            "else model_runner.attn_backend.get_cuda_graph_seq_len_fill_value()",
            "ForwardBatch._pad_inputs_to_size",
        ),
        (
            "the base class raises",
            "srt/layers/attention/base_attn_backend.py",
            "raise NotImplementedError()",
            "AttentionBackend.get_cuda_graph_seq_len_fill_value",
        ),
        (
            "(the triton backend defines it: 1)",
            "srt/layers/attention/triton_backend.py",
            "def get_cuda_graph_seq_len_fill_value(self):",
            None,
        ),
    ),
    gpu_note="One request; the first batch is the prefill, padded for DP attention on both ranks. `TARGET` and "
    "`EAGLE3_HEAD`: a\ntarget model and its EAGLE3 draft head. The CPU run takes that line through the "
    "`dp-padding-fill-value` device\nequivalence (the release's CPU branch asks for "
    "`get_cpu_graph_seq_len_fill_value`, made for intel_amx).",
    with_reports=("torch-native-verify-extend-prefix-lens",),
)

EAGLE_HEAD_SPLIT = Crash(
    name="eagle-draft-dp-attention-head-split",
    title="EAGLE (EAGLE-1) draft under DP attention: q heads split over the full TP group, the KV pool over "
    "attention TP, `kv_group_num` 0, sglang {release}",
    summary="Rank {rank} of DP attention (TP 3, DP 3; a busy rank: every rank crashes alike) crashes in the EAGLE "
    "**{phase}** pass, its first\n{forward_mode} batch (batch size {batch_size}). The EAGLE-1 head keeps the "
    "target's layout, so `llama.LlamaAttention` splits its\nq heads over the full TP group (`get_parallel().tp_size`, "
    "3), while the draft's KV pool and attention backend hold the\nattention-TP group's kv heads (`attn_tp_size`, 1): "
    "2 q heads per rank over 3 kv heads in the pool, and the triton decode\nkernel's `kv_group_num = q heads // kv "
    "heads` is 0, which `_grouped_head_tiles` divides by:",
    fix=((LLAMA_FILE, attn_tp_fixed_text),),
    fix_note="`fix.diff` (`patch -p1` in the folder holding `sglang/`) makes `LlamaAttention.__init__` take its "
    "heads from the\nattention-TP group (`get_parallel().attn_tp_size`) and build `qkv_proj` and `o_proj` with "
    '`parallel_group="attn_tp"`, as\n`qwen3.Qwen3Attention` does. Without DP attention the attention-TP group is '
    "the TP group, so nothing changes there.",
    run={"dp": 3, "algorithm": "EAGLE", "idle": "mid"},
    dp1={"dp": 1, "algorithm": "EAGLE"},
    expect={
        "phase": "draft",
        "forward_mode": "DECODE",
        "exception_type": "ZeroDivisionError",
        "raised_file": "sglang/kernels/ops/attention/decode_attention.py",
    },
    key="triton|DECODE|EAGLE draft|LlamaAttention.__init__|tp_size vs attn_tp_size|kv_group_num 0",
    server_command=f"{_LAUNCH} --speculative-algorithm EAGLE --speculative-draft-model-path EAGLE_HEAD {_SPEC} "
    "--tp-size 3 --dp-size 3 --enable-dp-attention --attention-backend triton --disable-cuda-graph",
    claims=(
        DP_ATTENTION_OWN_BATCH,
        (
            "EAGLE (any algorithm but EAGLE3, DFlash and a dense DSpark) keeps the target's layout when its draft "
            "model declares none",
            "srt/speculative/draft_parallel.py",
            "else DraftTPExecution.TARGET_LAYOUT",
            "legacy_draft_parallel_spec",
        ),
        (
            "`LlamaForCausalLMEagle` declares none (the EAGLE3 head declares SINGLE_GROUP: its own attention-TP group)",
            "srt/models/llama_eagle3.py",
            "draft_parallel_spec = DraftParallelSpec(tp_execution=DraftTPExecution.SINGLE_GROUP)",
            None,
        ),
        (
            "so the draft's layout installs no group of its own",
            "srt/speculative/draft_parallel.py",
            "return DraftParallelLayout(tp_group=None, attn_tp_size=parallel.attn_tp_size)",
            "resolve_draft_parallel_layout",
        ),
        (
            "and the draft is built in the target's TP group",
            "srt/speculative/spec_utils.py",
            "return contextlib.nullcontext()",
            "draft_tp_context",
        ),
        (
            "the EAGLE-1 head's layers are Llama decoder layers",
            "srt/models/llama_eagle.py",
            "LlamaDecoderLayer(",
            "LlamaModel.__init__",
        ),
        (
            "whose attention takes the full TP size",
            "srt/models/llama.py",
            "tp_size = get_parallel().tp_size",
            "LlamaAttention.__init__",
        ),
        (
            "and splits its q heads over it",
            "srt/models/llama.py",
            "self.num_heads = self.total_num_heads // tp_size",
            "LlamaAttention.__init__",
        ),
        (
            "(Qwen3's attention, the target's, splits over the attention-TP group)",
            "srt/models/qwen3.py",
            "attn_tp_size = get_parallel().attn_tp_size",
            "Qwen3Attention.__init__",
        ),
        (
            "the KV pool holds the attention-TP group's kv heads",
            "srt/mem_cache/kv_cache_configurator.py",
            "get_parallel().attn_tp_size, get_parallel().attn_dcp_size",
            "_build_mha_kv_pool",
        ),
        (
            "with DECODE disabled the EAGLE worker captures no draft graphs (the draft pass runs eagerly)",
            "srt/speculative/eagle_worker_v2.py",
            "if _is_cpu or check_cuda_graph_backend(Phase.DECODE, Backend.DISABLED):",
            "_capture_cuda_graphs",
        ),
        (
            "the eager runner runs a DECODE batch through `_execute_decode`",
            "srt/model_executor/runner/eager_runner.py",
            "return self._execute_decode(forward_batch, pp_proxy_tensors)",
            "execute",
        ),
        (
            "the triton backend's decode passes the layer's q heads and the pool's buffers to the kernel",
            "srt/layers/attention/triton_backend.py",
            "q.view(-1, layer.tp_q_head_num, layer.qk_head_dim),",
            "TritonAttnBackend.forward_decode",
        ),
        (
            "which divides the q heads by the pool's kv heads (2 // 3 = 0)",
            "kernels/ops/attention/decode_attention.py",
            "kv_group_num = q.shape[1] // kv_head_num",
            "decode_attention_fwd",
        ),
        (
            "a `kv_group_num` other than 1 takes the grouped kernel",
            "kernels/ops/attention/decode_attention.py",
            "if kv_group_num == 1:",
            "decode_attention_fwd",
        ),
        (
            "whose grid divides by `min(_GROUPED_BLOCK_H, kv_group_num)`",
            "kernels/ops/attention/decode_attention.py",
            "return triton.cdiv(head_num, min(_GROUPED_BLOCK_H, kv_group_num))",
            "_grouped_head_tiles",
        ),
        (
            "(CPU only) the model runner pads the heads to a multiple of the TP size: the CPU run's 4 q / 2 kv heads "
            "became 6 / 3",
            "srt/model_executor/model_runner.py",
            "self.model_config = adjust_config_with_unaligned_cpu_tp(",
            None,
        ),
        (
            "(on a GPU, a head count the TP size does not divide stops here, at load)",
            "srt/models/llama.py",
            "assert self.total_num_heads % tp_size == 0",
            "LlamaAttention.__init__",
        ),
    ),
    gpu_note="`TARGET`: a target whose attention splits over the attention-TP group (the CPU measurement used a "
    "tiny Qwen3;\na Llama target's own `LlamaAttention` splits as the draft's does). `EAGLE_HEAD`: an EAGLE-1 head "
    "(sglang loads it as\n`LlamaForCausalLMEagle`) with H q heads and K kv heads, H a multiple of the TP size and H / "
    "TP < K (attention TP 1):\nthe CPU ran a head of 4 q / 2 kv heads, which the CPU-only padding (last rows) made "
    "6 / 3 at TP 3; on GPUs that\npadding is not done, so the same 2 q heads over 3 kv heads need a 6 / 3 head, and "
    "a 4 / 2 head stops at load instead\n(the assert). The same arithmetic gives 0 for any MHA EAGLE-1 head "
    "(H = K) at `--tp-size 2 --dp-size 2`. No rank has to\nbe idle: the crash is every rank's first draft decode. "
    "With CUDA graphs on, the draft's decode graph capture runs\nthe same kernel call at start-up (not checked "
    "here).",
    with_fixes=("eagle-idle-batch", "verify-input"),
    acceptance=True,
)

CRASHES = {
    c.name: c for c in (VERIFY_KV_INDPTR, EAGLE_IDLE_EMPTY, TORCH_NATIVE_FILL, TORCH_NATIVE_VERIFY, EAGLE_HEAD_SPLIT)
}
# Kept for callers of the first report's names.
NAME = VERIFY_KV_INDPTR.name
SERVER_COMMAND = VERIFY_KV_INDPTR.server_command
CLAIMS = VERIFY_KV_INDPTR.claims


def unified_diff(before: str, after: str, file: str = SPEC_FILE) -> str:
    """``before`` -> ``after`` as a ``-p1`` unified diff of ``file``."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{file}", f"b/{file}", n=3
        )
    )


def relative_traceback(text: str) -> str:
    """The traceback with every path cut to ``sglang/...``, ``workbench/...`` or ``site-packages/...``
    (no machine's folders)."""
    return re.sub(r'File "[^"]*?/((?:sglang|workbench|site-packages)/[^"]+)"', r'File "\1"', text)


def changes_for(crash: Crash, files: dict[str, str]) -> dict[str, str]:
    """The checkout changes of ``crash``'s fixed run: its own fix and those of ``with_reports``, file by file."""
    out: dict[str, str] = {}
    for c in (crash, *(CRASHES[n] for n in crash.with_reports)):
        for file, fix in c.fix:
            out[file] = fix(out.get(file, files[file]))
    return out


def _summary(rec: RuntimeRecord) -> dict:
    c = rec.crash
    at = (c.raised_at if c else None) or {}
    return {
        "status": rec.status,
        "crash": {
            k: getattr(c, k)
            for k in ("rank", "phase", "forward_mode", "batch_size", "spec_info", "exception_type", "message")
        }
        | {"raised_at": f"{at.get('file')}:{at.get('line')}"}
        if c
        else None,
        "reference_equal": rec.reference.equal if rec.reference else None,
        "outputs": rec.outputs,
        "accept_length_mean": rec.metrics.get("accept_length_mean"),
        "equivalences": [e["name"] for e in rec.equivalences if e.get("installed")],
        "fixes": [f["fix"] for f in rec.fixes if f.get("applied")],
        "limits": rec.limits,
        "ranks_s": rec.timings.get("ranks_s"),
        "left_running": rec.processes.get("left_running"),
    }


def _readme(crash: Crash, release: str, res: dict) -> str:
    c = res["runs"]["as released"]["crash"]
    rows = "\n".join(f"| {x['claim']} | `{'`, `'.join(x['lines'])}` |" for x in res["claims"])
    fixed = res["runs"]["fixed"]
    also = [f"`{n}-{release}/fix.diff`" for n in crash.with_reports] + [f"`--fix {f}`" for f in crash.with_fixes]
    with_also = f"; with {' and '.join(also)} too, for the crash this run meets next, its own report" if also else ""
    fixed_run = (
        f"**{fixed['status']}**, its {len((fixed['outputs'] or [[]])[0])} tokens equal to HF transformers' greedy "
        f"tokens: **{fixed['reference_equal']}**, equal to {res['compared_with']}: **{res['fixed_equals_dp1']}**"
    )
    if crash.acceptance:
        fixed_run += (
            f"; the draft's accepted tokens per verify pass: {fixed['accept_length_mean']} (the comparison run: "
            f"{res['runs']['dp1']['accept_length_mean']})"
        )
    if fixed["crash"]:
        fc = fixed["crash"]
        fixed_run += (
            f"; it stopped at `{fc['raised_at']}` (rank {fc['rank']}, {fc['phase']}, {fc['forward_mode']}: "
            f"{fc['exception_type']}: {fc['message']})"
        )
    extra = "".join(f"\n\n{p}" for p in crash.extra)
    summary = crash.summary.format(release=release, **c)
    return f"""# {crash.title.format(release=release)}

{summary}

    {c["exception_type"]}: {c["message"]}
      at {c["raised_at"]}

Measured on sglang {release}'s own runtime (scheduler, EAGLE worker V2, model runner, attention backend) on a
CPU by the eagle-workbench, {res["generated_at"]}, workbench {res["workbench_commit"]}: `traceback.txt`,
`result.json` (`{res["commands"]["as released"]}`).

## Reaching it on GPUs

    {crash.server_command}
    {CLIENT_COMMAND}

Not run on GPUs by the workbench: the command is untested there. {crash.gpu_note}

Each claim about the flags and the path, with sglang {release}'s lines:

| claim | lines |
|---|---|
{rows}

## The smallest fix

{crash.fix_note} With that source (a checkout of {release} with the diff applied{with_also}) the same run is
{fixed_run}.{extra}

Regenerate: `python -m workbench.upstream.runtime.report --sglang {release} --crash {crash.name} --out
workbench/assets/upstream_reports`.
"""


def _checkout(tree, changes: dict[str, str], label: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="wb-report-"))
    tree.with_changes(changes, label=label).write(folder)
    return folder


def write_report(ctx: UpstreamContext, release: str, out: Path, crash: Crash = VERIFY_KV_INDPTR) -> tuple[dict, Path]:
    """Run ``crash``'s three runs and write the folder ``out/<name>-<release>``; (result, folder)."""
    tree = release_tree(ctx, release)
    claims = claim_lines(tree.root / "sglang", crash.claims)
    diff = "".join(unified_diff(tree.files[file], fix(tree.files[file]), file) for file, fix in crash.fix)
    fixed_changes = changes_for(crash, tree.files)
    dp1_changes = changes_for(CRASHES[crash.with_reports[0]], tree.files) if crash.with_reports else {}
    kw = {"max_new_tokens": MAX_NEW_TOKENS}
    as_released = from_dict(RuntimeRecord, run_runtime(ctx, release, **crash.run, **kw))
    folders = []
    try:
        src = _checkout(tree, fixed_changes, f"sglang {release} + fix.diff")
        folders.append(src)
        fixed = from_dict(
            RuntimeRecord,
            run_runtime(ctx, release, **crash.run, sglang_src=src, fixes=list(crash.with_fixes), **kw),
        )
        dp1_src = None
        if dp1_changes:
            dp1_src = _checkout(tree, dp1_changes, f"sglang {release} + {crash.with_reports[0]}")
            folders.append(dp1_src)
        dp1 = from_dict(RuntimeRecord, run_runtime(ctx, release, **crash.dp1, sglang_src=dp1_src, **kw))
    finally:
        for f in folders:
            shutil.rmtree(f, ignore_errors=True)
    runs = {"as released": _summary(as_released), "fixed": _summary(fixed), "dp1": _summary(dp1)}
    res = {
        "release": release,
        "crash": crash.name,
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "workbench_commit": workbench_commit(),
        "key": crash.key,
        "expect": crash.expect,
        "commands": _commands(crash, release),
        "runs": runs,
        "compared_with": _describe(crash.dp1) + (f" + {crash.with_reports[0]}'s diff" if crash.with_reports else ""),
        "fixed_equals_dp1": fixed.outputs is not None and fixed.outputs == dp1.outputs,
        "fix_files": [file for file, _ in crash.fix],
        "with_reports": list(crash.with_reports),
        "with_fixes": list(crash.with_fixes),
        "server_command": crash.server_command,
        "server_command_tested_on_gpu": False,
        "claims": claims,
    }
    folder = Path(out) / f"{crash.name}-{release}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    if as_released.crash:
        (folder / "traceback.txt").write_text(relative_traceback(as_released.crash.traceback or ""))
        (folder / "README.md").write_text(_readme(crash, release, res))
    (folder / "fix.diff").write_text(diff)
    return res, folder


def _describe(run: dict) -> str:
    return " ".join([f"dp {run['dp']}", run.get("backend", "triton"), run.get("algorithm", "EAGLE3")])


def _cli(run: dict, release: str, src: bool = False, fixes: tuple = ()) -> str:
    cmd = f"workbench upstream run --sglang {release}" + (" --sglang-src CHECKOUT" if src else "")
    cmd += f" --dp {run['dp']} --backend {run.get('backend', 'triton')}"
    if run.get("idle"):
        cmd += f" --idle {run['idle']}"
    if run.get("algorithm"):
        cmd += f" --speculative-algorithm {run['algorithm']}"
    return cmd + "".join(f" --fix {f}" for f in fixes) + f" --max-new-tokens {MAX_NEW_TOKENS}"


def _commands(crash: Crash, release: str) -> dict:
    others = "".join(f" and {n}-{release}/fix.diff" for n in crash.with_reports)
    return {
        "as released": _cli(crash.run, release),
        "fixed": _cli(crash.run, release, True, crash.with_fixes)
        + f" (CHECKOUT: the release's sources with fix.diff{others} applied)",
        "dp1": _cli(crash.dp1, release, bool(crash.with_reports))
        + (
            f" (CHECKOUT: the release's sources with {crash.with_reports[0]}-{release}/fix.diff)"
            if crash.with_reports
            else ""
        ),
        "report": f"python -m workbench.upstream.runtime.report --sglang {release} --crash {crash.name} --out DIR",
    }


def confirmed(res: dict) -> list[str]:
    """What the report does not show (empty: the crash as named, and the fix ok and equal)."""
    out = []
    want = res.get("expect") or VERIFY_KV_INDPTR.expect
    c = res["runs"]["as released"]["crash"] or {}
    got = {k: c.get(k) for k in want if k != "raised_file"}
    if "raised_file" in want:
        got["raised_file"] = (c.get("raised_at") or "").rsplit(":", 1)[0]
    if got != want:
        out.append(f"the release did not crash as {want}: {res['runs']['as released']}")
    fixed = res["runs"]["fixed"]
    if fixed["status"] != "ok" or not fixed["reference_equal"] or not res["fixed_equals_dp1"]:
        out.append(f"the fixed run is not ok and equal to HF and {res.get('compared_with', 'DP 1')}: {fixed}")
    return out


def load_reports(folder: Path = SHIPPED_REPORTS) -> list[dict]:
    """Every report folder's ``result.json`` under ``folder`` (JSON only), with its folder name, sorted by name."""
    out = []
    for path in sorted(Path(folder).glob("*/result.json")):
        res = json.loads(path.read_text())
        out.append({**res, "folder": path.parent.name})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sglang", required=True, metavar="X")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--crash", action="append", metavar="NAME", help=f"one of {', '.join(CRASHES)} (default: all)")
    args = ap.parse_args(argv)
    bad = [n for n in args.crash or [] if n not in CRASHES]
    if bad:
        echo(f"report: error: unknown crash {bad}; valid: {', '.join(CRASHES)}", err=True)
        return 2
    ctx = UpstreamContext()
    rc = 0
    try:
        release = check_versions(ctx, [args.sglang])[0]
        for name in args.crash or list(CRASHES):
            res, folder = write_report(ctx, release, args.out, CRASHES[name])
            problems = confirmed(res)
            echo(f"wrote {folder}" + "".join(f"\n  NOT SHOWN: {p}" for p in problems))
            rc = rc or (1 if problems else 0)
    except (ValueError, ReportError) as exc:
        echo(f"report: error: {exc}", err=True)
        return 2
    return rc


if __name__ == "__main__":
    from workbench.run.supervisor import exits_on_sigterm

    sys.exit(exits_on_sigterm("workbench.upstream.runtime.report", lambda: main(sys.argv[1:])))
