"""Standalone reproducer of one upstream finding: an attention backend's `init_forward_metadata` on the
spec input an idle DP rank installs, in an idle batch padded as DP attention pads it.

It imports only sglang and torch (never the workbench). Run it on CPU with the release's sources
importable (`pip install sglang==X --no-deps` into an env holding its dependencies, or
`PYTHONPATH=<folder holding sglang/>`); `TRITON_INTERPRET=1` runs the Triton kernels on CPU tensors.
Exit status 1 when `init_forward_metadata` raises the AttributeError (`status` `crashed`), 0 when it
returns (`ok`), 2 when the release has no such spec-input class (`ok`, `stopped_at` `no spec class`),
3 when importing it needs a library this host lacks (`error`; 0.5.10 imports the CUDA `sgl_kernel`
from its memory pools); the last line is `REPRO {json}`. With an argument, `python repro.py
CONFIG_JSON`, the same JSON is also written to the config's `result_path` (how eagle-workbench runs it).
"""

import atexit
import contextlib
import inspect
import json
import os
import shutil
import socket
import sys
import tempfile
import traceback

os.environ.setdefault("TRITON_INTERPRET", "1")

CASE: dict = {'key': 'triton|IDLE|DFlashVerifyInput|kv_indptr|TritonAttnBackend.init_forward_metadata',
 'backend': 'triton',
 'backend_module': 'sglang.srt.layers.attention.triton_backend',
 'backend_class': 'TritonAttnBackend',
 'spec_module': 'sglang.srt.speculative.dflash_info',
 'spec_class': 'DFlashVerifyInput',
 'idle_input_args': None,
 'init_args': {'draft_token': {'tensor': [0], 'dtype': 'int64', 'values': []},
               'positions': {'tensor': [0], 'dtype': 'int64', 'values': []},
               'draft_token_num': 4},
 'server_args': {'speculative_num_draft_tokens': 4, 'speculative_num_steps': 3, 'speculative_eagle_topk': 1},
 'expect': "'DFlashVerifyInput' object has no attribute 'kv_indptr' at "
           'sglang/srt/layers/attention/triton_backend.py:891'}  # written by eagle-workbench 37ed05c907e3b94f649ebdb51624415dc069c9af
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
    "torch_dtype": "float32",
}


def cuda_to_cpu():
    """Some idle-input constructors hard-code device="cuda"; on a CPU host build those tensors on the CPU."""
    import torch
    from torch.overrides import TorchFunctionMode

    class CudaToCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)

    return CudaToCpu() if not torch.cuda.is_available() else contextlib.nullcontext()


def runner_like(model_dir: str):
    """What a ModelRunner hands an attention backend: server args, model config, the real pools."""
    import importlib
    from types import SimpleNamespace

    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=model_dir, device="cpu", attention_backend=CASE["backend"], skip_tokenizer_init=True)
    for key, value in CASE["server_args"].items():
        try:
            setattr(args, key, value)
        except Exception:  # noqa: BLE001 - some releases freeze resolved server args
            object.__setattr__(args, key, value)
    with contextlib.suppress(ImportError):  # 0.5.2x: the runtime context a scheduler process publishes
        from sglang.srt.runtime_context import SpawnRanks, publish

        publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    with contextlib.suppress(ImportError):
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(args)
    config = ModelConfig.from_server_args(args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ps.init_distributed_environment(
        world_size=1, rank=0, local_rank=0, backend="gloo", distributed_init_method=f"tcp://127.0.0.1:{port}"
    )
    ps.initialize_model_parallel()
    req_pool = ReqToTokenPool(size=4, max_context_len=config.context_len, device="cpu", enable_memory_saver=False)
    kv = dict(size=64, page_size=1, dtype=config.dtype, layer_num=1, device="cpu", enable_memory_saver=False)
    kv_pool = MHATokenToKVPool(head_num=config.get_num_kv_heads(1), head_dim=config.head_dim, **kv)
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
        tp_rank=0,
        page_size=1,
        server_args=args,
        is_draft_worker=False,
        use_mla_backend=False,
        model_config=config,
        kv_cache_dtype=config.dtype,
        dtype=config.dtype,
        prefill_attention_backend_str=CASE["backend"],
        decode_attention_backend_str=CASE["backend"],
    )
    with contextlib.suppress(ImportError):  # later releases also ask for the algorithm and a KV translator
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        runner.spec_algorithm = SpeculativeAlgorithm.from_string("EAGLE")
        mr = importlib.import_module("sglang.srt.model_executor.model_runner").ModelRunner
        if hasattr(mr, "decode_num_tokens_per_req"):
            runner.decode_num_tokens_per_req = lambda **kw: mr.decode_num_tokens_per_req(runner, **kw)
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator

        want = dict(req_to_token=req_pool.req_to_token, token_to_kv_pool=kv_pool, page_size=1, device="cpu")
        want.update(token_to_kv_pool_allocator=None, is_draft_worker=False)
        accepted = inspect.signature(KVIndexTranslator.__init__).parameters
        runner.kv_index_translator = KVIndexTranslator(**{k: v for k, v in want.items() if k in accepted})
    return runner, torch


def report(result: dict) -> None:
    """The last line, `REPRO {json}`; also the config's `result_path` when the script was given a config."""
    print("REPRO " + json.dumps(result))
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as f:
            path = json.load(f)["result_path"]
        with open(path + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(path + ".tmp", path)


def main() -> int:
    import importlib

    model_dir = tempfile.mkdtemp(prefix="repro-model-")
    atexit.register(shutil.rmtree, model_dir, True)  # nothing left in the temp dir, however it ends
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(TINY_LLAMA, f)
    runner, torch = runner_like(model_dir)
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    try:
        cls = getattr(importlib.import_module(CASE["spec_module"]), CASE["spec_class"])
    except (ImportError, AttributeError) as exc:
        missing = getattr(exc, "name", None) or ""
        if isinstance(exc, ModuleNotFoundError) and not missing.startswith("sglang"):  # a library it imports
            report({"status": "error", "error": f"needs {missing}: {exc}"})
            return 3
        report({"status": "ok", "stopped_at": "no spec class", "message": f"{type(exc).__name__}: {exc}"})
        return 2  # a release before the class existed
    with cuda_to_cpu():  # the spec input an idle rank installs: the release's own idle constructor
        if CASE.get("idle_input_args") is not None:
            spec = cls.create_idle_input(**_taken(cls.create_idle_input, CASE["idle_input_args"], torch))
        else:  # a class without one: its constructor on the (empty) idle batch's values
            spec = cls(**_taken(cls, CASE["init_args"], torch))
    empty = torch.empty(0, dtype=torch.int64)
    batch = ForwardBatch(
        forward_mode=ForwardMode.IDLE,
        batch_size=0,
        input_ids=empty,
        req_pool_indices=empty,
        seq_lens=empty,
        out_cache_loc=empty,
        seq_lens_sum=0,
        seq_lens_cpu=empty,
        positions=empty,
        spec_info=spec,
        capture_hidden_mode=CaptureHiddenMode.LAST,
    )
    batch.lora_ids = []
    backend_cls = getattr(importlib.import_module(CASE["backend_module"]), CASE["backend_class"])
    backend = runner.attn_backend = backend_cls(runner)
    batch._pad_inputs_to_size(runner, num_tokens=2, bs=2)  # the DP-attention padding of an idle batch
    batch.batch_size = 2  # the runner's idle path calls init_forward_metadata because this is > 0
    try:
        backend.init_forward_metadata(batch)
    except AttributeError as exc:
        traceback.print_exc()
        at = traceback.extract_tb(exc.__traceback__)[-1]
        where = at.filename.replace(os.sep, "/").rsplit("/sglang/", 1)[-1]
        report({"status": "crashed", "error": str(exc), "at": f"sglang/{where}:{at.lineno}"})
        return 1
    meta = backend.forward_metadata
    indptr = getattr(meta, "kv_indptr", None)
    got = indptr[:3].tolist() if indptr is not None else None
    print(f"{CASE['backend_class']}.init_forward_metadata completed (kv_indptr {got})")
    report({"status": "ok", "kv_indptr": got})
    return 0


def _taken(fn, values: dict, torch) -> dict:
    """The arguments of `values` that this release's `fn` takes (all of them when it takes **kwargs)."""
    params = inspect.signature(fn).parameters
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {k: _arg(k, v, torch) for k, v in values.items() if anything or k in params}


def _arg(name: str, value, torch):
    if isinstance(value, dict) and "tensor" in value:
        dtype = getattr(torch, value["dtype"])
        if "fill" in value:
            return torch.full(value["tensor"], value["fill"], dtype=dtype)
        return torch.tensor(value["values"], dtype=dtype).reshape(value["tensor"])
    if isinstance(value, dict) and "enum" in value:
        import importlib

        module, cls, member = value["enum"]
        return getattr(getattr(importlib.import_module(module), cls), member)
    if name == "device":
        return torch.device(value)
    if name == "dtype":
        return getattr(torch, value)
    if name == "capture_hidden_mode":
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

        return getattr(CaptureHiddenMode, value)
    return value


if __name__ == "__main__":
    sys.exit(main())
