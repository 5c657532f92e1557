"""The fixed part of a replay: server args, model config, the 1-rank process group, the real pools,
and the model-runner object the backends read (what a real ``ModelRunner`` would hand them)."""

from __future__ import annotations

import inspect
import json
import os
import socket
import tempfile
from types import SimpleNamespace

from .idle import StandInModel

NUM_DRAFT = 4  # speculative_num_draft_tokens
NUM_STEPS = 3  # speculative_num_steps
TOPK = 1  # speculative_eagle_topk
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
# MLA backends (flashinfer_mla, cutlass_mla, trtllm_mla, ...) need a latent-attention model config
TINY_DEEPSEEK = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "first_k_dense_replace": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "kv_lora_rank": 32,
    "q_lora_rank": None,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 16,
    "v_head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "rope_theta": 10000.0,
}
# Linear-attention (Mamba2) backends need a hybrid model: one Mamba layer, one attention layer
TINY_NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hybrid_override_pattern": "M*",
    "mamba_num_heads": 4,
    "mamba_head_dim": 16,
    "n_groups": 1,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "layer_norm_epsilon": 1e-5,
    "torch_dtype": "float32",
}
PROFILES = {"mha": TINY_LLAMA, "mla": TINY_DEEPSEEK, "mamba": TINY_NEMOTRON_H}
# the server-args backend each profile is validated with (NemotronH refuses triton as its first layer is Mamba)
PROFILE_BACKEND = {"mha": "triton", "mla": "triton", "mamba": "flashinfer"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_dir(config: dict) -> str:
    """A folder holding a tiny model config (no weights: nothing here runs the model)."""
    path = tempfile.mkdtemp(prefix="wb-tiny-model-")
    for name, body in (("config.json", config), ("generation_config.json", {})):
        with open(os.path.join(path, name), "w") as f:
            json.dump(body, f)
    return path


def _set(obj, key: str, value) -> None:
    try:
        setattr(obj, key, value)
    except Exception:  # noqa: BLE001 - 0.5.17/0.5.18 freeze resolved server args
        object.__setattr__(obj, key, value)


def setup(cfg: dict, state: dict) -> SimpleNamespace:
    """Imports, the 1-rank process group and the runner of the default (MHA) profile; other
    profiles' runners are built on first use (`ctx.runner_for`)."""
    state["stage"] = "import"
    import torch
    from sglang.srt.distributed import parallel_state as ps

    state["model_dirs"] = []
    ctx = SimpleNamespace(torch=torch, runners={})
    ctx.runner_for = lambda profile: _profile(ctx, cfg, state, profile)
    ctx.runner = _profile(ctx, cfg, state, "mha", publish=True)
    state["stage"] = "distributed"
    ps.init_distributed_environment(
        world_size=1, rank=0, local_rank=0, backend="gloo", distributed_init_method=f"tcp://127.0.0.1:{_free_port()}"
    )
    ps.initialize_model_parallel()
    return ctx


def _profile(ctx, cfg: dict, state: dict, profile: str, publish: bool = False):
    """The runner object of one model profile (server args, model config, real pools)."""
    if profile in ctx.runners:
        return ctx.runners[profile]
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.server_args import ServerArgs

    state["stage"] = f"server_args ({profile})"
    path = model_dir(PROFILES[profile])
    state["model_dirs"].append(path)
    server_args = ServerArgs(
        model_path=path, device="cpu", attention_backend=PROFILE_BACKEND[profile], skip_tokenizer_init=True
    )
    for key, value in {
        "speculative_num_draft_tokens": NUM_DRAFT,
        "speculative_num_steps": NUM_STEPS,
        "speculative_eagle_topk": TOPK,
        "disable_cuda_graph": True,
        **cfg.get("server_args", {}),
    }.items():
        _set(server_args, key, value)
    if publish:
        _publish(server_args)
    state["stage"] = f"model_config ({profile})"
    model_config = ModelConfig.from_server_args(server_args)
    state["stage"] = f"pools ({profile})"
    runner = _runner(cfg, server_args, model_config, profile)
    ctx.runners[profile] = runner
    return runner


def _publish(server_args) -> None:
    """The process-wide server args as the release's scheduler process publishes them: 0.5.2x's
    runtime context (`publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0))`),
    older releases' global server args."""
    try:
        from sglang.srt.runtime_context import SpawnRanks, publish
    except ImportError:
        pass
    else:
        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    try:
        from sglang.srt.server_args import set_global_server_args_for_scheduler
    except ImportError:  # older releases have no global server args
        return
    set_global_server_args_for_scheduler(server_args)


def _pools(cfg: dict, model_config, profile: str):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, ReqToTokenPool

    rows, cols = cfg.get("req_to_token_shape") or (4, model_config.context_len)
    req_pool = ReqToTokenPool(size=rows, max_context_len=cols, device="cpu", enable_memory_saver=False)
    common = dict(
        size=max(64, cfg.get("kv_slots", 0)),
        page_size=1,
        dtype=model_config.dtype,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
    )
    if profile == "mamba":
        req_pool = _hybrid_pool(cfg, model_config, rows)
    if profile == "mla":
        kv_pool = MLATokenToKVPool(
            kv_lora_rank=model_config.kv_lora_rank, qk_rope_head_dim=model_config.qk_rope_head_dim, **common
        )
    else:
        kv_pool = MHATokenToKVPool(head_num=model_config.get_num_kv_heads(1), head_dim=model_config.head_dim, **common)
    return req_pool, kv_pool


def _hybrid_pool(cfg: dict, model_config, rows: int):
    """The release's HybridReqToTokenPool (request rows + a Mamba state pool) for the hybrid profile,
    built as the model runner builds it, its CUDA tensors on the CPU."""
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool

    from ...in_release.devices import CudaToCpu  # on use: only the hybrid profile builds CUDA tensors

    params = model_config.hf_config.mamba2_cache_params
    kwargs = dict(
        size=rows,
        mamba_size=rows,
        mamba_spec_state_size=rows,
        max_context_len=model_config.context_len,
        device="cpu",
        enable_memory_saver=False,
        cache_params=params,
        mamba_layer_ids=list(params.layers),
        enable_mamba_extra_buffer=False,
        speculative_num_draft_tokens=NUM_DRAFT,
        speculative_eagle_topk=cfg.get("server_args", {}).get("speculative_eagle_topk", TOPK),
        enable_overlap_schedule=False,
        start_layer=0,
        pre_alloc_size=0,
    )
    accepted = inspect.signature(HybridReqToTokenPool.__init__).parameters
    with CudaToCpu():
        return HybridReqToTokenPool(**{k: v for k, v in kwargs.items() if k in accepted})


def _runner(cfg: dict, server_args, model_config, profile: str) -> SimpleNamespace:
    req_pool, kv_pool = _pools(cfg, model_config, profile)
    runner = SimpleNamespace(
        req_to_token_pool=req_pool,
        token_to_kv_pool=kv_pool,
        token_to_kv_pool_allocator=_allocator(kv_pool, model_config.dtype),
        sliding_window_size=None,
        hybrid_gdn_config=None,
        kimi_linear_config=None,
        linear_attn_model_spec=None,
        device="cpu",
        gpu_id=0,
        tp_rank=0,
        tp_size=1,
        dp_size=1,
        attn_tp_rank=0,
        attn_tp_size=1,
        attn_dp_rank=0,
        attn_dp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_hybrid_swa=False,
        page_size=1,
        server_args=server_args,
        is_draft_worker=False,
        use_mla_backend=profile == "mla",
        mamba2_config=model_config.hf_config if profile == "mamba" else None,
        mambaish_config=model_config.hf_config if profile == "mamba" else None,
        prefill_attention_backend_str="triton",
        decode_attention_backend_str="triton",
        model_config=model_config,
        kv_cache_dtype=model_config.dtype,
        # the model runner's resolved KV dtype string (0.5.2x): the server args' when nothing overrides it
        kv_cache_dtype_str=getattr(server_args, "kv_cache_dtype", "auto"),
        dtype=model_config.dtype,
        attn_backend=None,
        model=StandInModel(),  # no layers: backends that scan the model's modules find none
    )
    _newer_runner_fields(runner, model_config, req_pool, kv_pool)
    return runner


def _allocator(kv_pool, dtype):
    """The release's real TokenToKVPoolAllocator over `kv_pool` (None where it cannot be built)."""
    import importlib

    for mod in ("sglang.srt.mem_cache.allocator", "sglang.srt.mem_cache.allocator.token"):
        try:
            cls = importlib.import_module(mod).TokenToKVPoolAllocator
        except (ImportError, AttributeError):
            continue
        kwargs = dict(size=kv_pool.size, page_size=1, dtype=dtype, device="cpu", kvcache=kv_pool, need_sort=False)
        accepted = inspect.signature(cls.__init__).parameters
        return cls(**{k: v for k, v in kwargs.items() if k in accepted})
    return None


def _newer_runner_fields(runner, model_config, req_pool, kv_pool) -> None:
    """What later releases' backends also ask the runner for (the algorithm, the KV translator)."""
    try:
        from sglang.srt.model_executor.model_runner import ModelRunner
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    except ImportError:
        return
    runner.spec_algorithm = SpeculativeAlgorithm.from_string("EAGLE")
    try:  # 0.5.16+: the runner carries its parallel ranks as one object
        from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    except ImportError:
        pass
    else:
        if hasattr(ParallelState, "trivial"):
            runner.ps = ParallelState.trivial()
    if hasattr(ModelRunner, "decode_num_tokens_per_req"):
        runner.decode_num_tokens_per_req = lambda **kw: ModelRunner.decode_num_tokens_per_req(runner, **kw)
    try:  # from 0.5.2x backends read KV ids through the runner's translator
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    except ImportError:
        return
    kwargs = dict(
        req_to_token=req_pool.req_to_token,
        token_to_kv_pool_allocator=runner.token_to_kv_pool_allocator,
        token_to_kv_pool=kv_pool,
        page_size=1,
        device="cpu",
        is_draft_worker=False,
    )
    accepted = inspect.signature(KVIndexTranslator.__init__).parameters
    runner.kv_index_translator = KVIndexTranslator(**{k: v for k, v in kwargs.items() if k in accepted})
