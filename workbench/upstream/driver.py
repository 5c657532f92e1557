"""Runs inside a replay venv as a script, never imported by the workbench.

Drives the real sglang code on CPU: real ReqToTokenPool / MHATokenToKVPool, an empty IDLE
ForwardBatch whose spec_info is the real EagleDraftExtendInput.create_idle_input(...),
padded by the real ForwardBatch._pad_inputs_to_size (the DP-attention padding), then the
real TritonAttnBackend(model_runner).init_forward_metadata(batch). Prints one line
`WB_RESULT {json}` with the outcome. TRITON_INTERPRET=1 must be set by the caller.
"""

import json
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from types import SimpleNamespace

MARK = "WB_RESULT "
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 1, "vocab_size": 256, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5, "torch_dtype": "float32", "rope_theta": 10000.0,
}


def _frames(tb) -> list:
    return [{"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
            for f in traceback.extract_tb(tb)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_dir() -> str:
    path = tempfile.mkdtemp(prefix="wb-tiny-llama-")
    for name, body in (("config.json", TINY_LLAMA), ("generation_config.json", {})):
        with open(os.path.join(path, name), "w") as f:
            json.dump(body, f)
    return path


def run(cfg: dict, state: dict) -> dict:
    """Build the real objects step by step (state["stage"] names the current one)."""
    bs, num_tokens = cfg["batch_size"], cfg["num_tokens"]
    state["stage"] = "import"
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    state["stage"] = "server_args"
    state["model_dir"] = _model_dir()
    server_args = ServerArgs(model_path=state["model_dir"], device="cpu", attention_backend="triton",
                             skip_tokenizer_init=True)
    for key, value in (("speculative_num_draft_tokens", 4), ("speculative_num_steps", 3),
                       ("speculative_eagle_topk", 1), ("disable_cuda_graph", True)):
        setattr(server_args, key, value)
    state["stage"] = "model_config"
    model_config = ModelConfig.from_server_args(server_args)

    state["stage"] = "distributed"
    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                    distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
    ps.initialize_model_parallel()  # every parallel size defaults to 1

    state["stage"] = "pools"
    ctx = model_config.context_len
    req_pool = ReqToTokenPool(size=4, max_context_len=ctx, device="cpu", enable_memory_saver=False)
    kv_pool = MHATokenToKVPool(size=64, page_size=1, dtype=model_config.dtype,
                               head_num=model_config.get_num_kv_heads(1),
                               head_dim=model_config.head_dim, layer_num=1, device="cpu",
                               enable_memory_saver=False)

    state["stage"] = "backend"
    runner = SimpleNamespace(
        req_to_token_pool=req_pool, token_to_kv_pool=kv_pool, token_to_kv_pool_allocator=None,
        sliding_window_size=None, hybrid_gdn_config=None, kimi_linear_config=None,
        linear_attn_model_spec=None, device="cpu", gpu_id=0, server_args=server_args,
        model_config=model_config, attn_backend=None)
    backend = TritonAttnBackend(runner)
    runner.attn_backend = backend

    state["stage"] = "spec_info"
    spec_info = EagleDraftExtendInput.create_idle_input(
        device=torch.device("cpu"), hidden_size=model_config.hidden_size, dtype=model_config.dtype,
        capture_hidden_mode=CaptureHiddenMode.LAST)

    state["stage"] = "batch"
    empty = dict(dtype=torch.int64, device="cpu")
    batch = ForwardBatch(
        forward_mode=ForwardMode.IDLE, batch_size=0, input_ids=torch.empty(0, **empty),
        req_pool_indices=torch.empty(0, **empty), seq_lens=torch.empty(0, **empty),
        out_cache_loc=torch.empty(0, **empty), seq_lens_sum=0,
        seq_lens_cpu=torch.empty(0, **empty), positions=torch.empty(0, **empty),
        spec_info=spec_info, capture_hidden_mode=CaptureHiddenMode.LAST)
    if getattr(batch, "lora_ids", None) is None:
        batch.lora_ids = []
    batch._pad_inputs_to_size(runner, num_tokens=num_tokens, bs=bs)
    batch.batch_size = bs
    state["batch"] = {"seq_lens": batch.seq_lens.tolist(),
                      "req_pool_indices": batch.req_pool_indices.tolist(),
                      "spec_info_type": type(spec_info).__name__,
                      "spec_info_has_kv_indptr": hasattr(spec_info, "kv_indptr"),
                      "spec_info_kv_indptr_is_none": getattr(spec_info, "kv_indptr", 0) is None}

    state["stage"] = "init_forward_metadata"
    backend.init_forward_metadata(batch)
    meta = backend.forward_metadata
    return {"kv_indptr": meta.kv_indptr[: bs + 1].tolist(),
            "kv_indices": meta.kv_indices[: int(meta.kv_indptr[bs])].tolist(),
            "num_kv_splits": meta.num_kv_splits.tolist()
            if getattr(meta, "num_kv_splits", None) is not None else None}


def _versions() -> dict:
    import importlib.metadata as md
    out = {"python": sys.version.split()[0], "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET")}
    for name in ("sglang", "torch", "triton", "transformers", "torchvision"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    cfg = {"batch_size": 2, "num_tokens": 2, **cfg}
    state: dict = {"stage": "start"}
    start = time.perf_counter()
    result: dict = {"env": {}}
    try:
        metrics = run(cfg, state)
        result.update(status="ok", metrics=metrics)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a record
        result.update(
            status="crashed" if state["stage"] == "init_forward_metadata" else "error",
            exception_type=type(exc).__name__, message=str(exc),
            traceback="".join(traceback.format_exception(exc)), frames=_frames(exc.__traceback__),
            missing=getattr(exc, "name", None) if isinstance(exc, ImportError) else None)
    finally:
        if state.get("model_dir"):
            shutil.rmtree(state["model_dir"], ignore_errors=True)
    result.update(stage=state["stage"], batch=state.get("batch"),
                  run_s=round(time.perf_counter() - start, 2))
    try:
        result["env"] = _versions()
    except Exception as exc:  # noqa: BLE001
        result["env"] = {"error": repr(exc)}
    sys.stdout.flush()
    print(MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
