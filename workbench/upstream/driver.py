"""Runs inside a replay environment as a script, never imported by the workbench.

Drives real sglang code on CPU: real ReqToTokenPool / MHATokenToKVPool, a real ForwardBatch
whose spec_info is a real spec-input class (its `create_idle_input(...)`, or a minimal instance
when it has none), then the real backend's `init_forward_metadata(batch)`. An IDLE batch is
empty and padded by the real `ForwardBatch._pad_inputs_to_size` (the DP-attention padding);
DECODE / TARGET_VERIFY batches hold two requests with real slot numbers in req_to_token; a
bundle batch (cfg["bundle"]) places the bundle's rows at their row ids. cfg["src_root"], when
given, is put first on sys.path (a release's unpacked sources, or a checkout). Prints one line
`WB_RESULT {json}`. TRITON_INTERPRET=1 must be set by the caller.
"""

import dataclasses
import inspect
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
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "rope_theta": 10000.0,
}
BACKENDS = {
    "triton": ("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend"),
    "torch_native": ("sglang.srt.layers.attention.torch_native_backend", "TorchNativeAttnBackend"),
}
DEFAULT_CASE = {
    "module": "sglang.srt.speculative.eagle_info",
    "class": "EagleDraftExtendInput",
    "mode": "IDLE",
    "backend": "triton",
}
NUM_DRAFT = 4


def _frames(tb) -> list:
    return [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
        for f in traceback.extract_tb(tb)
    ]


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


def setup(cfg: dict, state: dict) -> SimpleNamespace:
    """Imports, server args, model config, the 1-rank process group and the pools."""
    state["stage"] = "import"
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.server_args import ServerArgs

    state["stage"] = "server_args"
    state["model_dir"] = _model_dir()
    server_args = ServerArgs(
        model_path=state["model_dir"], device="cpu", attention_backend="triton", skip_tokenizer_init=True
    )
    for key, value in (
        ("speculative_num_draft_tokens", NUM_DRAFT),
        ("speculative_num_steps", 3),
        ("speculative_eagle_topk", 1),
        ("disable_cuda_graph", True),
    ):
        try:
            setattr(server_args, key, value)
        except Exception:  # noqa: BLE001 - 0.5.17/0.5.18 freeze resolved server args
            object.__setattr__(server_args, key, value)
    try:
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
    except ImportError:  # older releases have no global server args
        pass
    state["stage"] = "model_config"
    model_config = ModelConfig.from_server_args(server_args)
    state["stage"] = "distributed"
    ps.init_distributed_environment(
        world_size=1, rank=0, local_rank=0, backend="gloo", distributed_init_method=f"tcp://127.0.0.1:{_free_port()}"
    )
    ps.initialize_model_parallel()
    state["stage"] = "pools"
    rows, cols = cfg.get("req_to_token_shape") or (4, model_config.context_len)
    req_pool = ReqToTokenPool(size=rows, max_context_len=cols, device="cpu", enable_memory_saver=False)
    kv_pool = MHATokenToKVPool(
        size=max(64, cfg.get("kv_slots", 0)),
        page_size=1,
        dtype=model_config.dtype,
        head_num=model_config.get_num_kv_heads(1),
        head_dim=model_config.head_dim,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
    )
    runner = SimpleNamespace(
        req_to_token_pool=req_pool,
        token_to_kv_pool=kv_pool,
        token_to_kv_pool_allocator=None,
        sliding_window_size=None,
        hybrid_gdn_config=None,
        kimi_linear_config=None,
        linear_attn_model_spec=None,
        device="cpu",
        gpu_id=0,
        server_args=server_args,
        is_draft_worker=False,
        model_config=model_config,
        attn_backend=None,
    )
    try:  # newer backends ask the runner for its speculative algorithm and rows per decode slot
        from sglang.srt.model_executor.model_runner import ModelRunner
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    except ImportError:
        pass
    else:
        runner.spec_algorithm = SpeculativeAlgorithm.from_string("EAGLE")
        runner.kv_cache_dtype = model_config.dtype
        if hasattr(ModelRunner, "decode_num_tokens_per_req"):
            runner.decode_num_tokens_per_req = lambda **kw: ModelRunner.decode_num_tokens_per_req(runner, **kw)
    try:  # from 0.5.2x backends read KV ids through the runner's translator
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    except ImportError:
        pass
    else:
        kwargs = dict(
            req_to_token=req_pool.req_to_token,
            token_to_kv_pool_allocator=None,
            token_to_kv_pool=kv_pool,
            page_size=1,
            device="cpu",
            is_draft_worker=False,
        )
        accepted = inspect.signature(KVIndexTranslator.__init__).parameters
        runner.kv_index_translator = KVIndexTranslator(**{k: v for k, v in kwargs.items() if k in accepted})
    return SimpleNamespace(torch=torch, runner=runner, model_config=model_config)


def spec_input(ctx: SimpleNamespace, module: str, name: str) -> tuple:
    """(instance, how): the class's create_idle_input(...) if it has one, else a minimal instance."""
    import importlib

    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    torch = ctx.torch
    cls = getattr(importlib.import_module(module), name)
    known = {
        "device": torch.device("cpu"),
        "hidden_size": ctx.model_config.hidden_size,
        "dtype": ctx.model_config.dtype,
        "capture_hidden_mode": CaptureHiddenMode.LAST,
        "topk": 1,
        "spec_steps": 3,
        "num_verify_tokens": NUM_DRAFT,
        "num_draft_tokens": NUM_DRAFT,
        "draft_token_num": NUM_DRAFT,
        "block_size": NUM_DRAFT,
    }
    why = f"{name} has no create_idle_input"
    if hasattr(cls, "create_idle_input"):
        params = inspect.signature(cls.create_idle_input).parameters
        missing = [
            p
            for p, v in params.items()
            if p not in known and v.default is inspect._empty and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)
        ]
        try:
            if missing:
                raise TypeError(f"needs {missing}, which the replay cannot supply")
            return cls.create_idle_input(**{p: known[p] for p in params if p in known}), "create_idle_input"
        except (TypeError, AssertionError, RuntimeError) as exc:
            why = f"{name}.create_idle_input failed on CPU ({type(exc).__name__}: {exc})"
    return _minimal(cls, known), f"minimal instance; {why}"


def _minimal(cls, known: dict):
    if dataclasses.is_dataclass(cls):
        required = {
            f.name: None
            for f in dataclasses.fields(cls)
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        return cls(**required)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return cls(
        **{
            p.name: known.get(p.name)
            for p in params
            if p.default is inspect._empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
    )


def make_batch(ctx: SimpleNamespace, mode: str, spec, cfg: dict) -> tuple:
    """(a real ForwardBatch for `mode` (see the module docstring), notes)."""
    notes: list = []
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    torch, pool = ctx.torch, ctx.runner.req_to_token_pool
    i64 = dict(dtype=torch.int64, device="cpu")
    bundle = cfg.get("bundle")
    if bundle:
        for row, slots in zip(bundle["row_ids"], bundle["rows"], strict=False):
            pool.req_to_token[row, : len(slots)] = torch.tensor(slots, dtype=pool.req_to_token.dtype)
        seq, rpi = bundle["seq_lens"], bundle["req_pool_indices"]
        extra = {k: torch.tensor(bundle[k], **i64) for k in ("input_ids", "positions", "out_cache_loc")}
    elif mode == "IDLE":
        seq, rpi, extra = [], [], {k: torch.empty(0, **i64) for k in ("input_ids", "positions", "out_cache_loc")}
    else:
        seq, rpi = [3, 2], [0, 1]
        for row, slots in ((0, [1, 2, 3]), (1, [4, 5])):
            pool.req_to_token[row, : len(slots)] = torch.tensor(slots, dtype=pool.req_to_token.dtype)
        n = 2 if mode == "DECODE" else 2 * NUM_DRAFT
        extra = {
            "input_ids": torch.zeros(n, **i64),
            "positions": torch.zeros(n, **i64),
            "out_cache_loc": torch.arange(10, 10 + n, **i64),
        }
    batch = ForwardBatch(
        forward_mode=getattr(ForwardMode, mode),
        batch_size=len(seq),
        req_pool_indices=torch.tensor(rpi, **i64),
        seq_lens=torch.tensor(seq, **i64),
        seq_lens_sum=int(sum(seq)),
        seq_lens_cpu=torch.tensor(seq, **i64),
        spec_info=spec,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        **extra,
    )
    if mode == "IDLE" and not bundle:
        if getattr(batch, "lora_ids", None) is None:
            batch.lora_ids = []
        try:
            batch._pad_inputs_to_size(ctx.runner, num_tokens=cfg["num_tokens"], bs=cfg["batch_size"])
        except NotImplementedError:  # the backend defines no DP padding fill value (torch_native)
            shim = SimpleNamespace(attn_backend=SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1))
            batch._pad_inputs_to_size(shim, num_tokens=cfg["num_tokens"], bs=cfg["batch_size"])
            notes.append("padded with seq_len fill value 1: the backend defines no get_cuda_graph_seq_len_fill_value")
        batch.batch_size = cfg["batch_size"]
    return batch, notes


def run_case(ctx: SimpleNamespace, case: dict, cfg: dict) -> dict:
    """One (class, mode, backend) replay; never raises."""
    import importlib

    state = {"stage": "backend"}
    out = {"case": case}
    try:
        mod, cls_name = BACKENDS[case["backend"]]
        backend = getattr(importlib.import_module(mod), cls_name)(ctx.runner)
        ctx.runner.attn_backend = backend
        state["stage"] = "spec_info"
        spec, how = spec_input(ctx, case["module"], case["class"])
        out["spec_info_built_by"] = how
        state["stage"] = "batch"
        batch, out["notes"] = make_batch(ctx, case["mode"], spec, cfg)
        bs = batch.batch_size
        out["batch"] = {
            "seq_lens": batch.seq_lens.tolist(),
            "req_pool_indices": batch.req_pool_indices.tolist(),
            "spec_info_type": type(spec).__name__,
            "spec_info_has_kv_indptr": hasattr(spec, "kv_indptr"),
            "spec_info_kv_indptr_is_none": getattr(spec, "kv_indptr", 0) is None,
        }
        state["stage"] = "init_forward_metadata"
        backend.init_forward_metadata(batch)
        meta = getattr(backend, "forward_metadata", None)
        metrics = {}
        if getattr(meta, "kv_indptr", None) is not None:
            metrics["kv_indptr"] = meta.kv_indptr[: bs + 1].tolist()
            metrics["kv_indices"] = meta.kv_indices[: int(meta.kv_indptr[bs])].tolist()
            splits = getattr(meta, "num_kv_splits", None)
            metrics["num_kv_splits"] = splits.tolist() if splits is not None else None
        out.update(status="ok", metrics=metrics)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a record
        out.update(
            status="crashed" if state["stage"] == "init_forward_metadata" else "error",
            exception_type=type(exc).__name__,
            message=str(exc),
            traceback="".join(traceback.format_exception(exc)),
            frames=_frames(exc.__traceback__),
            missing=getattr(exc, "name", None) if isinstance(exc, ImportError) else None,
        )
    out["stage"] = state["stage"]
    return out


def _versions() -> dict:
    import importlib.metadata as md

    import sglang

    out = {
        "python": sys.version.split()[0],
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
        "sglang_path": os.path.dirname(sglang.__file__),
    }
    for name in ("torch", "triton", "transformers", "torchvision"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    cfg = {"batch_size": 2, "num_tokens": 2, **cfg}
    if cfg.get("src_root"):
        sys.path.insert(0, cfg["src_root"])
    cases = cfg.get("cases") or [DEFAULT_CASE]
    state: dict = {"stage": "start"}
    start = time.perf_counter()
    result: dict = {"env": {}}
    try:
        ctx = setup(cfg, state)
        outs = [run_case(ctx, case, cfg) for case in cases]
        result["cases"] = outs
        result.update({k: v for k, v in outs[0].items() if k != "case"})
    except BaseException as exc:  # noqa: BLE001
        result.update(
            status="error",
            exception_type=type(exc).__name__,
            message=str(exc),
            traceback="".join(traceback.format_exception(exc)),
            frames=_frames(exc.__traceback__),
            missing=getattr(exc, "name", None) if isinstance(exc, ImportError) else None,
            stage=state["stage"],
        )
    finally:
        if state.get("model_dir"):
            shutil.rmtree(state["model_dir"], ignore_errors=True)
    result["run_s"] = round(time.perf_counter() - start, 2)
    try:
        result["env"] = _versions()
    except Exception as exc:  # noqa: BLE001
        result["env"] = {"error": repr(exc)}
    sys.stdout.flush()
    print(MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
