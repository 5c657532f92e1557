"""An upstream-ready report of a crash the real runtime confirmed end to end: what to send to SGLang.

    python -m workbench.upstream.runtime.report --sglang 0.5.23 --out workbench/assets/upstream_reports

Runs the release three times on this CPU (DP 2 as released: the crash; DP 2 on a checkout of the
release with the smallest fix applied to its source file: ok; DP 1) and writes one folder per crash:

- ``README.md``: the crash (rank, pass, forward mode, batch size, file:line), the GPU server command that
  reaches it, and each claim about which flags make the idle pass run eagerly, with the release's lines
  (found in the release's files by their code when the report is written; a claim whose code is not
  there stops the report);
- ``traceback.txt``: the idle rank's traceback, paths below the package root;
- ``fix.diff``: the smallest fix, a unified diff against the release's file (``patch -p1`` in the folder
  holding ``sglang/``); the fixed run ran that very text;
- ``result.json``: the three runs' outcomes, the fixed run's equality to HF transformers and to DP 1,
  the commands, the date, the workbench commit.

Exit codes: 0 written and the fix made the run ok and equal to HF and DP 1; 1 the release did not crash
as the report says, or the fixed run was not ok and equal; 2 a bad argument or a missing claim line.
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
from pathlib import Path

from workbench.run.provenance import workbench_commit
from workbench.run.serialise import from_dict
from workbench.upstream.context import UpstreamContext, echo
from workbench.upstream.sources.releases import check_versions
from workbench.upstream.sources.trees import release_tree

from .release_record import RuntimeRecord
from .release_run import run_runtime

SPEC_FILE = "sglang/srt/speculative/eagle_info.py"
CLASS, FIELD = "EagleVerifyInput", "kv_indptr"
FIELD_LINES = (
    "    # None on an idle DP rank's verify input: the attention backends rebuild the metadata from seq_lens.",
    "    kv_indptr: Optional[torch.Tensor] = None",
)
NAME = "triton-idle-verify-kv-indptr"
MAX_NEW_TOKENS = 16
# The GPU command: DP attention over 2 GPUs (rank 1 idle with one request), EAGLE3, triton, graphs off.
SERVER_COMMAND = (
    "python -m sglang.launch_server --model-path TARGET "
    "--speculative-algorithm EAGLE3 --speculative-draft-model-path EAGLE3_HEAD "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
    "--tp-size 2 --dp-size 2 --enable-dp-attention --attention-backend triton --disable-cuda-graph"
)
CLIENT_COMMAND = (
    "curl -s localhost:30000/generate -H 'Content-Type: application/json' "
    '-d \'{"text": "def fibonacci(n):", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}\''
)
# (claim, file under sglang/, the code that backs it, the function it is in or None): each line number is
# read from the release when the report is written.
CLAIMS = (
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
    (
        "which, for a padded idle batch (DP attention pads it: batch size > 0), calls `init_forward_metadata`",
        "srt/model_executor/runner/eager_runner.py",
        "model_runner.attn_backend.init_forward_metadata(forward_batch)",
        "_execute_idle",
    ),
    (
        "`--enable-dp-attention` is still accepted (deprecated): DP attention, whose MLP sync pads the idle rank",
        "srt/server_args.py",
        '"--enable-dp-attention",',
        None,
    ),
    (
        "with graphs on, a batch the decode graph runner can run is replayed here and returns before the eager "
        "path and its `init_forward_metadata` call",
        "srt/model_executor/model_runner.py",
        "ret = self.decode_cuda_graph_runner.execute(",
        "_forward_raw",
    ),
)


class ReportError(ValueError):
    """A claim whose code is not in the release, or a file without the class to fix (exit 2)."""


def claim_lines(pkg: Path) -> list[dict]:
    """Each claim with ``sglang/<file>:<line>`` of its code in the package folder ``pkg``."""
    out = []
    for claim, rel, code, within in CLAIMS:
        path = pkg / rel
        text = path.read_text() if path.is_file() else ""
        lines = text.splitlines()
        span = (1, len(lines))
        if within is not None:
            defs = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == within]
            if len(defs) != 1:
                raise ReportError(f"claim {claim!r}: sglang/{rel} defines {len(defs)} function(s) {within}")
            span = (defs[0].lineno, defs[0].end_lineno)
        found = [i for i, line in enumerate(lines, 1) if code in line and span[0] <= i <= span[1]]
        if len(found) != 1:
            where = f"sglang/{rel}" + (f" {within}()" if within else "")
            raise ReportError(f"claim {claim!r}: {code!r} is in {where} {len(found)} time(s), not once")
        out.append({"claim": claim, "lines": [f"sglang/{rel}:{found[0]}"], "code": code})
    return out


def fixed_text(text: str) -> str:
    """``text`` (the release's eagle_info.py) with ``kv_indptr`` declared last in ``EagleVerifyInput``'s fields."""
    tree = ast.parse(text)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS), None)
    if cls is None:
        raise ReportError(f"{SPEC_FILE} has no class {CLASS}")
    fields = [n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    if any(n.target.id == FIELD for n in fields):
        raise ReportError(f"{CLASS} already declares {FIELD}: nothing to fix")
    lines = text.splitlines(keepends=True)
    at = fields[-1].end_lineno
    return "".join(lines[:at] + [line + "\n" for line in FIELD_LINES] + lines[at:])


def unified_diff(before: str, after: str) -> str:
    """``before`` -> ``after`` as a ``-p1`` unified diff of ``SPEC_FILE``."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{SPEC_FILE}", f"b/{SPEC_FILE}", n=3
        )
    )


def relative_traceback(text: str) -> str:
    """The traceback with every path cut to ``sglang/...``, ``workbench/...`` or ``site-packages/...``
    (no machine's folders)."""
    return re.sub(r'File "[^"]*?/((?:sglang|workbench|site-packages)/[^"]+)"', r'File "\1"', text)


def _summary(rec: RuntimeRecord) -> dict:
    c = rec.crash
    at = (c.raised_at if c else None) or {}
    return {
        "status": rec.status,
        "crash": {k: getattr(c, k) for k in ("rank", "phase", "forward_mode", "batch_size", "spec_info", "message")}
        | {"raised_at": f"{at.get('file')}:{at.get('line')}"}
        if c
        else None,
        "reference_equal": rec.reference.equal if rec.reference else None,
        "outputs": rec.outputs,
        "accept_length_mean": rec.metrics.get("accept_length_mean"),
        "equivalences": [e["name"] for e in rec.equivalences if e.get("installed")],
        "ranks_s": rec.timings.get("ranks_s"),
        "left_running": rec.processes.get("left_running"),
    }


def _readme(release: str, crash: dict, claims: list[dict], res: dict) -> str:
    c = crash["crash"]
    rows = "\n".join(f"| {x['claim']} | `{'`, `'.join(x['lines'])}` |" for x in claims)
    fixed = res["runs"]["fixed"]
    return f"""# `{c["spec_info"]}.{FIELD}` read on an idle DP rank's verify pass, sglang {release}

The idle rank (rank {c["rank"]}) of DP attention crashes in the EAGLE **{c["phase"]}** pass: its padded
{c["forward_mode"]} batch (batch size {c["batch_size"]}) carries the `{c["spec_info"]}` the V2 worker installs, and
`TritonAttnBackend.init_forward_metadata` reads its `{FIELD}`, which the class does not declare:

    AttributeError: {c["message"]}
      at {c["raised_at"]}

Measured on sglang {release}'s own runtime (scheduler, EAGLEWorkerV2, model runner, triton backend) on a
CPU by the eagle-workbench, {res["generated_at"]}, workbench {res["workbench_commit"]}: `traceback.txt`, `result.json`.

## Reaching it on GPUs

    {SERVER_COMMAND}
    {CLIENT_COMMAND}

One request leaves rank 1 idle. Why the idle pass runs eagerly (and so calls `init_forward_metadata`), with
sglang {release}'s lines:

| claim | lines |
|---|---|
{rows}

The last row is the other side: with CUDA graphs on, such a batch does not reach the eager
`init_forward_metadata` (whether the graph path reads the field is not checked here). `TARGET` and
`EAGLE3_HEAD`: a target
model and its EAGLE3 draft head (the CPU measurement used a tiny Qwen3 target and an EAGLE3 head that
sglang loads as `LlamaForCausalLMEagle3`). Not run on GPUs by the workbench.

## The smallest fix

`fix.diff` (`patch -p1` in the folder holding `sglang/`) declares `{FIELD}: Optional[torch.Tensor] = None` on
`{CLASS}`, as PR #28221 did on `EagleDraftExtendInput`: the backend's `spec_info.{FIELD} is None` test then
takes its seq_lens branch. With that source (a checkout of {release} with the diff applied) the same run is
**{fixed["status"]}**, its {len((fixed["outputs"] or [[]])[0])} tokens equal to HF transformers' greedy tokens:
**{fixed["reference_equal"]}**, equal to DP 1: **{res["fixed_equals_dp1"]}**.

Regenerate: `python -m workbench.upstream.runtime.report --sglang {release} --out workbench/assets/upstream_reports`.
"""


def write_report(ctx: UpstreamContext, release: str, out: Path) -> tuple[dict, Path]:
    """Run the three runs and write the folder ``out/<NAME>-<release>``; (result, folder)."""
    tree = release_tree(ctx, release)
    claims = claim_lines(tree.root / "sglang")
    before = tree.files[SPEC_FILE]
    after = fixed_text(before)
    crash = from_dict(RuntimeRecord, run_runtime(ctx, release, dp=2, max_new_tokens=MAX_NEW_TOKENS))
    dp1 = from_dict(RuntimeRecord, run_runtime(ctx, release, dp=1, max_new_tokens=MAX_NEW_TOKENS))
    checkout = Path(tempfile.mkdtemp(prefix="wb-report-"))
    try:
        tree.with_changes({SPEC_FILE: after}, label=f"sglang {release} + fix.diff").write(checkout)
        fixed = from_dict(
            RuntimeRecord, run_runtime(ctx, release, dp=2, sglang_src=checkout, max_new_tokens=MAX_NEW_TOKENS)
        )
    finally:
        shutil.rmtree(checkout, ignore_errors=True)
    runs = {"as released": _summary(crash), "fixed": _summary(fixed), "dp1": _summary(dp1)}
    res = {
        "release": release,
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "workbench_commit": workbench_commit(),
        "key": f"triton|IDLE|{CLASS}|{FIELD}|TritonAttnBackend.init_forward_metadata",
        "commands": {
            "as released": f"workbench upstream run --sglang {release} --dp 2 --backend triton",
            "fixed": f"workbench upstream run --sglang {release} --sglang-src CHECKOUT --dp 2 --backend triton "
            "(CHECKOUT: the release's sources with fix.diff applied)",
            "dp1": f"workbench upstream run --sglang {release} --dp 1 --backend triton",
            "report": f"python -m workbench.upstream.runtime.report --sglang {release} --out DIR",
        },
        "runs": runs,
        "fixed_equals_dp1": fixed.outputs is not None and fixed.outputs == dp1.outputs,
        "server_command": SERVER_COMMAND,
        "claims": claims,
    }
    folder = Path(out) / f"{NAME}-{release}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    if crash.crash:
        (folder / "traceback.txt").write_text(relative_traceback(crash.crash.traceback or ""))
        (folder / "README.md").write_text(_readme(release, runs["as released"], claims, res))
    (folder / "fix.diff").write_text(unified_diff(before, after))
    return res, folder


def confirmed(res: dict) -> list[str]:
    """What the report does not show (empty: the crash as named, and the fix ok and equal)."""
    out = []
    c = res["runs"]["as released"]["crash"] or {}
    if (c.get("spec_info"), c.get("phase"), c.get("forward_mode")) != (CLASS, "verify", "IDLE"):
        out.append(f"the release did not crash in the idle verify pass on {CLASS}: {res['runs']['as released']}")
    fixed = res["runs"]["fixed"]
    if fixed["status"] != "ok" or not fixed["reference_equal"] or not res["fixed_equals_dp1"]:
        out.append(f"the fixed run is not ok and equal to HF and DP 1: {fixed}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sglang", required=True, metavar="X")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    ctx = UpstreamContext()
    try:
        release = check_versions(ctx, [args.sglang])[0]
        res, folder = write_report(ctx, release, args.out)
    except (ValueError, ReportError) as exc:
        echo(f"report: error: {exc}", err=True)
        return 2
    problems = confirmed(res)
    echo(f"wrote {folder}" + "".join(f"\n  NOT SHOWN: {p}" for p in problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
