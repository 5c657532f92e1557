"""A CUDA-graph runner's replay decision (``can_run_graph``) run by the release's real code, with a
STAND-IN for the graph capture.

``DecodeCudaGraphRunner`` is built only by its constructor, and the constructor ends by capturing
CUDA graphs (``self.capture()`` under ``model_capture_mode()``). Here the release's real ``__init__``
runs on the replay's runner object (``setup``) with ``capture`` replaced by ``CAPTURE_STAND_IN``: a
method that records it was called and captures nothing. Every other attribute is set by the release's
own constructor (bucket sizes, ``require_mlp_tp_gather``, the attention backend's CUDA-graph state,
the static buffers, on the CPU), so ``can_run_graph`` decides on the release's own values. No graph
exists, so none is replayed: the run stops once the decision is made (``DecisionMade``). When it
answers True, the pre-graph part of the replay that follows (``load_batch``) runs first and its
result is recorded as ``after_decision``, not judged: the attention backend there is the replay's
Triton one, not the draft model's own.

Scenario ``dspark-idle`` (the only one): rank 0 of a DSpark server under DP attention (2 DP ranks),
whose draft model is a MoE model (DeepSeek V4), is idle while rank 1 decodes 2 requests. The
release's own ``DraftBlockProposer.run_idle_participation`` builds the draft worker's IDLE batch by
hand, fills its DP metadata (``_fill_dp_moe_sync_metadata``) and calls the draft model runner's
``forward``: the release's ``ModelRunner.forward`` on the replay's runner object, which asks the graph
runner ``can_run_graph``. Stand-ins, each listed in the record's ``stand_ins``: the capture, the
``ScheduleBatch`` (only the three DP-sync fields the idle path reads), and the draft model (named by
its config alone, as ``draft_is_deepseek_v4`` reads it; the static buffers are sized by the tiny
Llama profile).
"""

from __future__ import annotations

import signal
from types import SimpleNamespace

from ...in_release.devices import CudaToCpu
from .case import CaseTimeout, LineWatch, _alarm, crashed, sglang_frames
from .setup import NUM_DRAFT, model_dir

CAPTURE_STAND_IN = "DecodeCudaGraphRunner.capture stood in: the real __init__ ran, no CUDA graph was captured"
SCENARIOS = ("dspark-idle",)
# rank 0 idle, rank 1 decoding 2 requests: what the DP sync gathers (request counts on decode rounds)
GLOBAL_NUM_TOKENS = [0, 2]
# the draft model as `draft_is_deepseek_v4` reads it: its config's architecture
DSPARK_DRAFT_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLMDSpark"],
    "model_type": "deepseek_v4",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 256,
}


class DecisionMade(Exception):
    """The graph runner's ``can_run_graph`` returned; nothing after it is replayed."""

    def __init__(self, value: bool):
        super().__init__(f"can_run_graph returned {value!r}")
        self.value = value


def _capture_stand_in(self) -> None:
    self._wb_capture_skipped = True


def build_graph_runner(ctx, state: dict, out: dict):
    """The release's ``DecodeCudaGraphRunner`` built by its real ``__init__`` on the draft runner
    object, ``capture`` replaced by the stand-in; the runner object gets what the constructor asks a
    model runner for."""
    import torch
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = ctx.runner
    draft_dir = model_dir(DSPARK_DRAFT_CONFIG)
    state.setdefault("model_dirs", []).append(draft_dir)
    object.__setattr__(runner.server_args, "speculative_draft_model_path", draft_dir)
    runner.device = "cuda"  # a GPU server's runner: its forward asks the CUDA-graph runner (cpu asks the CPU graph)
    runner.is_draft_worker = True
    runner.spec_algorithm = SpeculativeAlgorithm.from_string("DSPARK")
    runner.ngram_embedding_manager = SimpleNamespace(enabled=False)
    runner.tp_group = ps.get_tp_group()
    runner.graph_shared_output = SimpleNamespace(get_logits_buffer=lambda vocab, rows: torch.empty(rows, vocab))
    runner.get_pp_proxy_topk_size = lambda: 0  # no pipeline parallelism: no proxy tensors
    runner.get_pp_proxy_residual_num_blocks = lambda: 0  # 0.5.17+
    out["stand_ins"] += [
        CAPTURE_STAND_IN,
        "draft model: a config naming DeepseekV4ForCausalLMDSpark (no weights); the static buffers "
        "are sized by the tiny Llama profile",
        "model runner: the replay's runner object (setup), device 'cuda' with tensors redirected to the cpu",
    ]
    cls = type("DecodeCudaGraphRunnerCaptureStandIn", (DecodeCudaGraphRunner,), {"capture": _capture_stand_in})
    with CudaToCpu():
        runner.attn_backend = TritonAttnBackend(runner)
        graph = cls(runner)
    if not getattr(graph, "_wb_capture_skipped", False):
        raise RuntimeError("the release's DecodeCudaGraphRunner.__init__ never called capture()")
    runner.decode_cuda_graph_runner = graph
    out["graph_runner"] = {
        k: getattr(graph, k, None)
        for k in ("require_mlp_tp_gather", "require_mlp_sync", "max_bs", "captured_req_width", "disable_padding")
    }
    return graph


def _model_runner_forward(runner) -> None:
    """The release's ``ModelRunner.forward`` (and ``_forward_raw``) bound to the replay's runner object."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    for key, value in (
        ("forward_pass_id", 0),
        ("msprobe_debugger", None),
        ("canary_manager", None),
        ("hisparse_coordinator", None),
        ("enable_elastic_ep", False),
        ("eplb_manager", None),
    ):
        if not hasattr(runner, key):
            setattr(runner, key, value)
    runner._forward_raw = lambda *a, **kw: ModelRunner._forward_raw(runner, *a, **kw)
    runner.forward = lambda *a, **kw: ModelRunner.forward(runner, *a, **kw)


def _proposer(runner):
    """The release's ``DraftBlockProposer``, built as ``DsparkWorkerV2`` builds it for a MoE draft
    under DP attention (``dp_moe_sync=True``), its spec input by the release's ``make_draft_block_spec_info``."""
    from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info
    from sglang.srt.speculative.dspark_components.dspark_draft import DraftBlockProposer

    gamma = NUM_DRAFT - 1
    with CudaToCpu():
        spec = make_draft_block_spec_info(draft_token_num=gamma, device=runner.device)
    return DraftBlockProposer(
        draft_model=None,
        draft_model_runner=runner,
        gamma=gamma,
        mask_token_id=0,
        draft_block_spec_info=spec,
        dp_moe_sync=True,
    )


def run_graph_case(ctx, case: dict, state: dict) -> dict:
    """One graph-runner case; never raises (failures become records). ``run``: ``decided`` (with the
    decision), ``raised`` (where), or ``error``; ``ran``: the watched lines that ran."""
    out: dict = {"case": case, "runs": [], "stand_ins": [], "stage": "graph runner"}
    if case.get("scenario") not in SCENARIOS:
        out["error"] = f"unknown graph-runner scenario {case.get('scenario')!r} (known: {', '.join(SCENARIOS)})"
        return out
    try:
        graph = build_graph_runner(ctx, state, out)
        out["stage"] = "proposer"
        _model_runner_forward(ctx.runner)
        proposer = _proposer(ctx.runner)
        real = type(graph).can_run_graph

        def decide(forward_batch):
            out["batch"] = {
                "forward_mode": forward_batch.forward_mode.name,
                "batch_size": forward_batch.batch_size,
                "original_global_num_tokens_cpu": forward_batch.original_global_num_tokens_cpu,
                "global_num_tokens_cpu": forward_batch.global_num_tokens_cpu,
            }
            value = real(graph, forward_batch)
            if value:
                out["after_decision"] = _load_batch(graph, forward_batch)
            raise DecisionMade(value)

        graph.can_run_graph = decide
        batch = SimpleNamespace(
            global_num_tokens=list(GLOBAL_NUM_TOKENS),
            global_num_tokens_for_logprob=list(GLOBAL_NUM_TOKENS),
            can_run_dp_cuda_graph=True,
        )
        out["stand_ins"].append(
            "ScheduleBatch: global_num_tokens and global_num_tokens_for_logprob "
            f"{GLOBAL_NUM_TOKENS}, can_run_dp_cuda_graph True (the DP sync of idle rank 0; no other field)"
        )
        out["stage"] = "run_idle_participation"
        out["runs"].append(_run_once(proposer, batch, case))
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a record
        out.update(error=f"{type(exc).__name__}: {exc}", frames=sglang_frames(exc.__traceback__))
    return out


def _load_batch(graph, forward_batch) -> dict:
    """The pre-graph part of the replay the release runs next when ``can_run_graph`` is True
    (``execute`` -> ``load_batch``: the static buffers filled, the attention metadata for the graph);
    what it raised is recorded, not raised (the decision is already made)."""
    try:
        graph.load_batch(forward_batch, None)
    except Exception as exc:  # noqa: BLE001 - recorded: the verdict is about the decision
        return crashed(exc, frames_kept=5)
    return {"status": "ok", "bs": getattr(graph, "bs", None), "raw_bs": getattr(graph, "raw_bs", None)}


def _run_once(proposer, batch, case: dict) -> dict:
    run: dict = {"status": "error", "path": "DraftBlockProposer.run_idle_participation"}
    watch = LineWatch(case.get("watch") or [])
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(case.get("timeout_s", 120)))
    try:
        with CudaToCpu(), watch:
            proposer.run_idle_participation(batch)
        run.update(status="error", message="run_idle_participation returned without asking can_run_graph")
    except DecisionMade as made:
        run.update(status="ok", stopped_at="graph decision", can_run_graph=made.value)
    except CaseTimeout:
        run.update(status="timeout", exception="CaseTimeout", message=f"ran past {case.get('timeout_s', 120)} s")
    except Exception as exc:  # noqa: BLE001
        run.update(crashed(exc))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    run["ran"] = sorted(watch.ran)
    run["entered"] = sorted(watch.entered)
    return run


__all__ = ["CAPTURE_STAND_IN", "SCENARIOS", "DecisionMade", "build_graph_runner", "run_graph_case"]
