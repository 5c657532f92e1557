"""Replay a real-runtime rank's crash bundle in the release's own code, inside that release's kernel.

Runs in the Jupyter kernel ``workbench upstream kernel --sglang V`` registers (the release's
environment, its sources first, the runtime's CPU shims applied by ``release_kernel.py``); the
workbench's folder is on that kernel's path after sglang's. ``replay_bundle(path)`` loads and checks
the bundle (``sglang_bundle``), applies the fixes the run had (and any ``fixes`` asked for, with the
runtime's own ``fixes.py``), builds the release's own backend class over real pools of the recorded
sizes (a ``ReqToTokenPool`` holding the recorded rows, an ``MHATokenToKVPool``, the release's
``ServerArgs`` and ``ModelConfig`` from the recorded arguments, the runner's recorded settings), a
``ForwardBatch`` from the recorded fields and an instance of the release's spec-input class with the
recorded attributes set and the missing ones left missing, then calls the failing method. What the
method raises propagates (``%debug`` stops in SGLang's frame), with a note saying whether it is the
run's exception at the run's file and line; when it completes, the result compares the backend's
``forward_metadata`` with what the run computed with the fix. ``replay_result`` returns the same as
a ``Replay`` instead of raising, its ``status`` saying how the call ended.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from workbench.debug.bundle import DTYPES
from workbench.debug.sglang_bundle import RankBundle, load_rank_bundle

RUNTIME_DIR = Path(__file__).resolve().parents[1] / "upstream" / "runtime"  # fixes.py, shims.py
SETTINGS = ("SGLANG_USE_CPU_ENGINE", "TRITON_INTERPRET", "TORCH_COMPILE_DISABLE")
ENUM_HOMES = {
    "ForwardMode": "sglang.srt.model_executor.forward_batch_info",
    "CaptureHiddenMode": "sglang.srt.model_executor.forward_batch_info",
    "DpPaddingMode": "sglang.srt.layers.dp_attention",
    "SpeculativeAlgorithm": "sglang.srt.speculative.spec_info",
    "SpecInputType": "sglang.srt.speculative.spec_info",
}
SET_BY_RUNNER = ("prefill_attention_backend_str", "decode_attention_backend_str")
_APPLIED: set[str] = set()  # the fixes this kernel applied (they change classes in place, for good)


class ReplayError(RuntimeError):
    """The replay could not be set up faithfully (wrong kernel, a fix already applied, a rebuilt
    backend unlike the run's); the message names what differs."""


@dataclass
class Replay:
    """How a replay of the failing method ended, its ``status`` (``workbench.run.record.STATUSES``):
    ``crashed`` (the exception's type, message, innermost sglang frame and whether they are the run's)
    or ``ok`` (it returned; the backend's metadata compared with the fixed run's)."""

    bundle: str
    fixes: list[str]
    status: str
    exception: dict | None = None
    same_as_run: bool | None = None
    metadata: dict = field(default_factory=dict)
    metadata_equal: bool | None = None
    differences: list[str] = field(default_factory=list)
    not_rebuilt: list[str] = field(default_factory=list)


def _fixes_module():
    if str(RUNTIME_DIR) not in sys.path:
        sys.path.append(str(RUNTIME_DIR))
    return importlib.import_module("fixes")


def _check_kernel(b: RankBundle) -> None:
    """This process runs the bundle's sources with the run's settings and shims."""
    import sglang

    src = Path(b.meta["release"]["src_root"]).resolve()
    here = Path(sglang.__file__).resolve()
    if src not in here.parents:
        raise ReplayError(
            f"this kernel imports sglang from {here.parent}, the bundle's run used {src}: start the kernel "
            f"`workbench upstream kernel --sglang {b.meta['release']['version']}"
            f"{'' if src.name.startswith('sglang-') else ' --sglang-src ' + str(src)}` registers"
        )
    recorded = b.meta["code_state"].get("settings", {})
    wrong = {k: (os.environ.get(k), recorded.get(k)) for k in SETTINGS if os.environ.get(k) != recorded.get(k)}
    if wrong:
        raise ReplayError(f"settings differ from the run's (this kernel, the run): {wrong}")
    kernel = sys.modules.get("release_kernel")
    shims = getattr(kernel, "CODE_STATE", {}).get("shims")
    if shims != b.meta["code_state"].get("shims"):
        raise ReplayError(
            f"CPU shims installed here {shims} differ from the run's {b.meta['code_state'].get('shims')}: "
            "replay in the kernel `workbench upstream kernel` registers"
        )
    equivalent = getattr(kernel, "CODE_STATE", {}).get("equivalences")
    if equivalent != b.meta["code_state"].get("equivalences", []):
        raise ReplayError(
            f"device equivalences installed here {equivalent} differ from the run's "
            f"{b.meta['code_state'].get('equivalences', [])}: replay in the kernel `workbench upstream kernel` "
            "registers"
        )


def _apply_fixes(b: RankBundle, extra: list[str]) -> list[str]:
    fixes = _fixes_module()
    wanted = [x["fix"] for x in b.meta["code_state"].get("fixes", [])] + [f for f in extra]
    unknown = [f for f in wanted if f not in fixes.FIXES]
    if unknown:
        raise ReplayError(f"unknown fix {unknown}; valid: {list(fixes.FIXES)}")
    stale = sorted(_APPLIED - set(wanted))
    if stale:
        raise ReplayError(
            f"{stale} already applied in this kernel (by an earlier replay) and not asked for now: fixes change "
            "the release's classes in place, so restart the kernel to replay without them"
        )
    fixes.apply([f for f in dict.fromkeys(wanted) if f not in _APPLIED])
    _APPLIED.update(wanted)
    return list(dict.fromkeys(wanted))


def _enum(type_name: str, member: str):
    cls = getattr(importlib.import_module(ENUM_HOMES[type_name]), type_name)
    if member not in cls.__members__:
        raise ReplayError(f"{type_name} member {member!r} is not in this release; valid: {list(cls.__members__)}")
    return cls[member]


def _value(b: RankBundle, entry: dict | None, not_rebuilt: list, name: str):
    if entry is not None and entry["kind"] == "enum":
        return _enum(entry["type"], entry["value"])
    if entry is not None and entry["kind"] in ("object", "list_omitted"):
        not_rebuilt.append(f"{name} ({entry.get('type') or entry['kind']})")
    return b.value(entry)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _distributed() -> None:
    """SGLang's process groups, one rank over gloo (once per kernel), as its replays build them."""
    from sglang.srt.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        return
    ps.init_distributed_environment(
        world_size=1, rank=0, local_rank=0, backend="gloo", distributed_init_method=f"tcp://127.0.0.1:{_free_port()}"
    )
    ps.initialize_model_parallel()


def _accepted(fn, kwargs: dict) -> dict:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def _runner(b: RankBundle):
    """The release's ServerArgs, ModelConfig and real pools of the recorded sizes, as a runner object."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(**b.meta["server_args"])
    try:
        from sglang.srt.server_args import set_global_server_args_for_scheduler
    except ImportError:
        pass
    else:
        set_global_server_args_for_scheduler(server_args)
    run = b.meta["runner"]
    if run["is_draft_worker"]:
        model_config = ModelConfig.from_server_args(
            server_args, model_path=server_args.speculative_draft_model_path, is_draft_model=True
        )
    else:
        model_config = ModelConfig.from_server_args(server_args)
    _distributed()
    table, kv = b.meta["pools"]["req_to_token"], b.meta["pools"]["token_to_kv"]
    req_pool = ReqToTokenPool(
        **_accepted(
            ReqToTokenPool.__init__,
            dict(size=table["size"], max_context_len=table["shape"][1], device="cpu", enable_memory_saver=False),
        )
    )
    if list(req_pool.req_to_token.shape) != table["shape"]:
        raise ReplayError(f"rebuilt request table {list(req_pool.req_to_token.shape)}, the run's {table['shape']}")
    kv_pool = MHATokenToKVPool(
        **_accepted(
            MHATokenToKVPool.__init__,
            dict(
                size=kv["size"],
                page_size=kv["page_size"],
                dtype=DTYPES[kv["dtype"]],
                head_num=kv["head_num"],
                head_dim=kv["head_dim"],
                v_head_dim=kv.get("v_head_dim"),
                layer_num=kv["layer_num"],
                start_layer=kv.get("start_layer"),
                device="cpu",
                enable_memory_saver=False,
            ),
        )
    )
    runner = SimpleNamespace(**run["attributes"])
    runner.__dict__.update(
        server_args=server_args,
        model_config=model_config,
        req_to_token_pool=req_pool,
        token_to_kv_pool=kv_pool,
        token_to_kv_pool_allocator=None,
        hybrid_gdn_config=getattr(runner, "hybrid_gdn_config", None),
        kimi_linear_config=getattr(runner, "kimi_linear_config", None),
        linear_attn_model_spec=getattr(runner, "linear_attn_model_spec", None),
        sliding_window_size=getattr(runner, "sliding_window_size", None),
    )
    return runner


def _backend(b: RankBundle, runner):
    meta = b.meta["backend"]
    if meta["class"] is None:
        raise ReplayError(
            f"{b.path}: no attention backend's method raised in the run ({b.meta['exception']['type']} at "
            f"{(b.meta['raised_at'] or {}).get('relative')}): nothing to replay on a backend"
        )
    cls = getattr(importlib.import_module(meta["module"]), meta["class"])
    recorded = meta["attributes"]
    backend = cls(runner, **_accepted(cls.__init__, {"skip_prefill": recorded.get("skip_prefill", False)}))
    for k in SET_BY_RUNNER:  # ModelRunner.init_attention_backend sets these on the backend it built
        if k in recorded:
            setattr(backend, k, recorded[k])
    differ = [
        f"{k}: rebuilt {getattr(backend, k)!r}, run {v!r}"
        for k, v in recorded.items()
        if hasattr(backend, k) and getattr(backend, k) != v and k != "forward_metadata"
    ]
    if differ:
        raise ReplayError(f"the rebuilt {meta['class']} differs from the run's: {differ}")
    return backend


def _batch(b: RankBundle, backend, runner, not_rebuilt: list):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    fields = b.meta["forward_batch"]
    kwargs = {
        f.name: _value(b, fields.get(f.name), not_rebuilt, f"forward_batch.{f.name}")
        for f in dataclasses.fields(ForwardBatch)
        if f.init and f.name in fields
    }
    fb = ForwardBatch(**kwargs)
    for name in ("req_to_token_pool", "token_to_kv_pool"):
        if any(f.name == name for f in dataclasses.fields(ForwardBatch)):
            setattr(fb, name, getattr(runner, name))
    if any(f.name == "attn_backend" for f in dataclasses.fields(ForwardBatch)):
        fb.attn_backend = backend
    fb.spec_info = _spec(b, not_rebuilt)
    rows, row_ids = b.tensors["req_to_token.rows"], b.tensors["req_to_token.row_ids"]
    runner.req_to_token_pool.req_to_token[row_ids, : rows.shape[1]] = rows.to(torch.int32)
    return fb


def _spec(b: RankBundle, not_rebuilt: list):
    """An instance of the release's spec-input class with the recorded attributes; missing ones stay missing."""
    spec = b.meta["spec_info"]
    if spec is None:
        return None
    cls = getattr(importlib.import_module(spec["module"]), spec["class"])
    obj = cls.__new__(cls)  # the recorded state, not a new input: __post_init__ would recompute it
    for name, entry in spec["attributes"].items():
        object.__setattr__(obj, name, _value(b, entry, not_rebuilt, f"spec_info.{name}"))
    return obj


def _innermost_sglang(tb) -> dict | None:
    marker = os.sep + "sglang" + os.sep
    at = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if marker in code.co_filename:
            rel = "sglang" + os.sep + code.co_filename.split(marker, 1)[1]
            at = {"relative": rel, "line": tb.tb_lineno, "function": code.co_name}
        tb = tb.tb_next
    return at


def _same_as_run(b: RankBundle, exc: BaseException, at: dict | None) -> bool:
    run, e = b.meta["raised_at"] or {}, b.meta["exception"]
    return (
        type(exc).__name__ == e["type"]
        and str(exc) == e["message"]
        and at is not None
        and (at["relative"], at["line"]) == (run.get("relative"), run.get("line"))
    )


def _compare(b: RankBundle, backend) -> tuple[dict, bool | None, list[str]]:
    """The backend's forward_metadata against the run's with the fix (bundle ``fixed``)."""
    got = getattr(backend, "forward_metadata", None)
    out = {}
    for f in dataclasses.fields(got) if got is not None else ():
        v = getattr(got, f.name)
        if isinstance(v, torch.Tensor):  # float buffers are torch.empty scratch: their shape only
            v = {"shape": list(v.shape), "dtype": str(v.dtype)[6:]} if v.is_floating_point() else v.tolist()
        out[f.name] = v
    fixed = b.meta.get("fixed") or {}
    if "metadata" not in fixed:
        return out, None, [f"the bundle holds no fixed-run metadata ({fixed.get('error', 'no fix names this class')})"]
    diffs = []
    for name, entry in fixed["metadata"].items():
        mine = getattr(got, name, None)
        if entry["kind"] == "tensor":
            want = b.tensors[entry["key"]]
            same = isinstance(mine, torch.Tensor) and mine.dtype == want.dtype and torch.equal(mine, want)
        elif entry["kind"] == "tensor_omitted":
            same = isinstance(mine, torch.Tensor) and list(mine.shape) == entry["shape"]
        elif entry["kind"] == "none":
            same = mine is None
        else:
            same = mine == entry.get("value")
        if not same:
            diffs.append(f"{name}: replay {out.get(name)!r}, fixed run {b.value(entry)!r}")
    return out, not diffs, diffs


def replay_bundle(path: str | Path, fixes: list[str] | tuple[str, ...] = ()) -> Replay:
    """Replay the bundle at ``path`` in this kernel's release (module docstring). Raises what the
    release's method raises, with a note comparing it with the run; returns a ``Replay`` when the
    method completes (its metadata compared with the fixed run's)."""
    b = load_rank_bundle(path)
    _check_kernel(b)
    applied = _apply_fixes(b, list(fixes))
    not_rebuilt: list[str] = []
    runner = _runner(b)
    backend = _backend(b, runner)
    fb = _batch(b, backend, runner, not_rebuilt)
    method = getattr(backend, b.meta["backend"]["method"])
    try:
        method(fb)
    except Exception as exc:
        at = _innermost_sglang(exc.__traceback__)
        run = b.meta["raised_at"] or {}
        same = _same_as_run(b, exc, at)
        exc.add_note(
            f"[workbench replay of {b.path}] {'the same exception at the same line as' if same else 'NOT what'} "
            f"the run raised (rank {b.meta['rank']}: {b.meta['exception']['type']} at "
            f"{run.get('relative')}:{run.get('line')}); replayed with fixes {applied}"
        )
        exc.wb_replay = Replay(  # read by replay_result
            str(b.path), applied, "crashed", {"type": type(exc).__name__, "message": str(exc), **(at or {})}, same
        )
        exc.wb_replay.not_rebuilt = not_rebuilt
        raise
    metadata, equal, diffs = _compare(b, backend)
    return Replay(str(b.path), applied, "ok", None, None, metadata, equal, diffs, not_rebuilt)


def replay_result(path: str | Path, fixes: list[str] | tuple[str, ...] = ()) -> Replay:
    """``replay_bundle`` as a ``Replay``: ``crashed`` with what it raised (and whether it is the run's), or
    ``ok`` with what it computed."""
    try:
        return replay_bundle(path, fixes)
    except Exception as exc:
        if not hasattr(exc, "wb_replay"):
            raise  # a bundle or set-up error, not the replayed method's
        return exc.wb_replay


def bundle_attributes(path: str | Path) -> dict[str, Any]:
    """The spec input's class and its attributes as the run held them (present and missing)."""
    b = load_rank_bundle(path)
    spec = b.meta["spec_info"] or {}
    return {
        "class": f"{spec.get('module')}.{spec.get('class')}",
        "present": sorted(spec.get("attributes", {})),
        "missing": spec.get("missing", []),
    }
