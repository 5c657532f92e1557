"""An idle input carried in a field of a result object (the shape of sglang 0.5.13's idle draft-extend).

On 0.5.13 the idle `EagleDraftExtendInput` is built inside the verify input's `verify()`, handed back
in a result dataclass (built by a classmethod `create_idle(draft_extend_input=...)`, then patched
by a subclass's `verify()` that calls `super().verify()`), and the worker installs
`verify_output.draft_extend_input`. The lint follows the field of an object it sees built; it does
not follow a field read off a parameter (the scheduler's next-round `result.next_draft_input`).
"""

from __future__ import annotations

import ast
import textwrap

from upstream_fixtures import ATTN_DIR, BACKEND, MODES, MODES_FILE, SPEC_DIR

from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.classes import spec_input_classes
from workbench.upstream.static.flow import Program
from workbench.upstream.static.lint import analyse
from workbench.upstream.static.runners import dp_holds

INFO = textwrap.dedent("""
    from dataclasses import dataclass
    class SpecInput:
        def __init__(self, spec_input_type):
            self.spec_input_type = spec_input_type
    @dataclass
    class DraftExtendInput(SpecInput):
        hidden_states: "Tensor" = None
        input_ids: "Tensor" = None
        KV_FIELD
        def __post_init__(self):
            super().__init__(SpecInputType.DRAFT_EXTEND)
        @classmethod
        def create_idle_input(cls, device):
            return cls(input_ids=empty(0))
    @dataclass
    class SubDraftExtendInput(DraftExtendInput):
        pass
    @dataclass
    class VerifyOutput:
        draft_extend_input: DraftExtendInput
        accept_tokens: "Tensor"
        @classmethod
        def create_idle(cls, *, draft_extend_input, device):
            return cls(draft_extend_input=draft_extend_input, accept_tokens=empty(0))
    class VerifyInput(SpecInput):
        def __init__(self):
            super().__init__(SpecInputType.VERIFY)
            self.kv_indptr = None
        def verify(self, batch, logits):
            if batch.forward_mode.is_idle():
                idle = DraftExtendInput.create_idle_input(device=batch.device)
                return VerifyOutput.create_idle(draft_extend_input=idle, device=batch.device)
            ext = DraftExtendInput(hidden_states=logits, input_ids=batch.input_ids)
            return VerifyOutput(ext, batch.input_ids)
    class SubVerifyInput(VerifyInput):
        def verify(self, *args, **kwargs):
            output = super().verify(*args, **kwargs)
            output.draft_extend_input = to_sub(output.draft_extend_input)
            return output
    def to_sub(draft_extend_input):
        if isinstance(draft_extend_input, SubDraftExtendInput):
            return draft_extend_input
        return SubDraftExtendInput(input_ids=draft_extend_input.input_ids)
""")

WORKER = textwrap.dedent("""
    class Worker:
        def draft(self, batch):
            return SubVerifyInput()
        def verify(self, batch):
            spec_info: SubVerifyInput = batch.spec_info
            batch.forward_mode = ForwardMode.TARGET_VERIFY if not batch.forward_mode.is_idle() else ForwardMode.IDLE
            res = spec_info.verify(batch, None)
            return res
        def forward_batch_generation(self, batch):
            batch.spec_info = self.draft(batch)
            verify_output = self.verify(batch)
            draft_extend_input = verify_output.draft_extend_input
            if self.server_args.enable_dp_attention or draft_extend_input.input_ids.shape[0] > 0:
                batch.spec_info = draft_extend_input
                self.forward_draft_extend_after_decode(batch)
            else:
                self.idle_stub(batch)
        def forward_draft_extend_after_decode(self, batch):
            if batch.forward_mode.is_idle():
                return
            fb = ForwardBatch.init_new(batch, self.draft_runner)
            self.draft_runner.forward(fb)
        def idle_stub(self, batch):
            batch.spec_info = SubVerifyInput()
    class Scheduler:
        def process(self, batch, result):
            batch.spec_info = result.draft_extend_input
""")

RUNNER = textwrap.dedent("""
    class ModelRunner:
        def forward(self, forward_batch):
            if forward_batch.forward_mode.is_idle():
                return self.forward_idle(forward_batch)
        def forward_idle(self, forward_batch):
            self.attn_backend.init_forward_metadata(forward_batch)
""")

# A worker with more `verify` methods than name resolution follows: only the local annotation
# `spec_info: SubVerifyInput` resolves `spec_info.verify(...)`.
MANY_VERIFY = "".join(f"class Other{i}:\n    def verify(self, batch):\n        return None\n" for i in range(7))


def _tree(with_field: bool = False, extra: str = ""):
    field = "kv_indptr: 'Tensor' = None" if with_field else "pass"
    return memory_tree(
        {
            MODES_FILE: MODES,
            f"{SPEC_DIR}info.py": INFO.replace("KV_FIELD", field),
            f"{SPEC_DIR}worker.py": WORKER + extra,
            "sglang/srt/model_executor/model_runner.py": RUNNER,
            f"{ATTN_DIR}toy_backend.py": BACKEND,
        },
        "toy-0.5.13-shape",
    )


def _findings(result: dict) -> dict[tuple[str, str, str], dict]:
    return {(f["mode"], f["spec_class"], f["attr"]): f for f in result["findings"]}


def test_the_idle_input_in_a_result_field_is_an_idle_install() -> None:
    result = analyse(_tree(extra=MANY_VERIFY))
    f = _findings(result)[("IDLE", "DraftExtendInput", "kv_indptr")]
    worker = f"{SPEC_DIR}worker.py"
    assert [(i["file"], i["line"], i["function"]) for i in f["installs"]] == [
        (worker, 15, "Worker.forward_batch_generation")
    ]
    install = next(
        i for i in result["installs"] if i["class"] == "DraftExtendInput" and i["install_line"] == 15 and i["modes"]
    )
    assert install["mode_from"] == "idle input" and install["built_at"] == f"{SPEC_DIR}info.py:15"
    # the steps it took (one of its paths: through SubVerifyInput.verify's super() call, or its to_sub
    # helper's parameter): the field of what Worker.verify returns, from SubVerifyInput.verify
    assert install["via"][:4] == [
        "local draft_extend_input",
        "field draft_extend_input",
        "returned by Worker.verify",
        "returned by SubVerifyInput.verify",
    ]
    # as on 0.5.13, the draft-extend pass returns early in IDLE and the batch is kept past the worker
    # (`escapes`, not decided); not `unreachable`: the `else` of the DP-attention test never runs in
    # IDLE, so the stub it installs there does not kill the install
    assert f["verdict"] is None, f["verdict_reason"]
    assert [p["fate"] for p in f["runner_paths"]] == ["escapes"]


def test_the_fixed_class_makes_no_finding() -> None:
    assert ("IDLE", "DraftExtendInput", "kv_indptr") not in _findings(analyse(_tree(with_field=True)))


def test_a_field_read_off_a_parameter_is_not_followed() -> None:
    result = analyse(_tree())
    lines = {i["install_line"] for i in result["installs"] + result["unresolved_installs"]}
    scheduler_line = next(  # Scheduler.process: `batch.spec_info = result.draft_extend_input`
        i for i, line in enumerate(WORKER.splitlines(), 1) if "result.draft_extend_input" in line
    )
    assert scheduler_line not in lines and 15 in lines


def test_local_annotations_and_super_resolve_calls() -> None:
    tree = _tree(extra=MANY_VERIFY)
    files = {p: tree.get(p) for p in (f"{SPEC_DIR}info.py", f"{SPEC_DIR}worker.py")}
    program = Program(files, spec_input_classes({f"{SPEC_DIR}info.py": files[f"{SPEC_DIR}info.py"]}))
    fns = {f.qualname: f for f in program.funcs}

    def callees(qualname: str, method: str) -> list[str]:
        fn = fns[qualname]
        call = next(n for n in fn.nodes if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == method)
        return [c.qualname for c, _ in program.callees(call, fn)]

    assert callees("Worker.verify", "verify") == ["SubVerifyInput.verify"]
    assert callees("SubVerifyInput.verify", "verify") == ["VerifyInput.verify"]
    assert program.dataclass_fields("SubDraftExtendInput") == ["hidden_states", "input_ids"]
    assert program.dataclass_fields("VerifyOutput") == ["draft_extend_input", "accept_tokens"]


def test_a_positional_dataclass_argument_is_its_field() -> None:
    result = analyse(_tree())
    built = {i["built_at"] for i in result["installs"] + result["unresolved_installs"] if i["install_line"] == 15}
    # `VerifyOutput(ext, ...)`: the non-idle input built at line 34 of info.py reaches the field by position
    assert f"{SPEC_DIR}info.py:34" in built


def test_dp_attention_conditions() -> None:
    assert dp_holds("self.server_args.enable_dp_attention or x > 0") is True
    assert dp_holds("not (self.server_args.enable_dp_attention or x > 0)") is False
    assert dp_holds("not self.server_args.enable_dp_attention") is False
    assert dp_holds("enable_dp_attention and x > 0") is None
    assert dp_holds("x > 0") is None
