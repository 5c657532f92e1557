"""Every CPU shim the real runtime applies to a released SGLang, and nothing else.

Runs inside the release environment (imports no workbench module). A shim names the upstream call
it passes by an anchor (a file under ``sglang/`` and a code fragment; ``apply`` records the line
numbers it has in the release being run), the names it replaces, wraps or provides (``targets``),
why it is needed on CPU only, and, when it reroutes a CUDA-only op, which of SGLang's own Triton
or torch versions it runs instead (``uses``). A shim whose anchor is not in a release is not
installed there (the record says so). The lane's test checks that no target lies in the spec-input
classes, the attention backends, the DP padding, the runner's idle path or the scheduler's choice
of spec input; ``shim_guard.check`` checks the same on the live modules of every run.
"""

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .shim_support import SglKernelFinder, load_functions


def _cpu_ops() -> dict:
    from .cpu_ops import OPS  # on use: only releases importing sgl_kernel's CPU ops need it

    return OPS


# SGLang's own Triton versions of the tree ops (0.5.23 kernels/ops/speculative/spec_tree.py, its XPU
# path); the launcher sets WB_SPEC_TREE_SRC to that file of the cached 0.5.23 sources.
SPEC_TREE_ENV = "WB_SPEC_TREE_SRC"
TREE_NAMES = (
    "TreeMaskMode",
    "sgl_build_tree_kernel_efficient_triton",
    "verify_tree_greedy_kernel_triton",
    "sgl_build_tree_kernel_triton",
    "verify_tree_greedy_triton",
)
# Names releases import from sgl_kernel at module import on paths this lane never runs.
SGL_KERNEL_STUBS = {
    "sgl_kernel.kvcacheio": (  # 0.5.12 mem_cache/memory_pool_host.py (HiCache host transfers)
        "transfer_kv_all_layer",
        "transfer_kv_all_layer_direct_lf_pf",
        "transfer_kv_all_layer_lf_pf",
        "transfer_kv_all_layer_lf_ph",
        "transfer_kv_all_layer_mla",
        "transfer_kv_all_layer_mla_lf_pf",
        "transfer_kv_direct",
        "transfer_kv_per_layer",
        "transfer_kv_per_layer_direct_pf_lf",
        "transfer_kv_per_layer_mla",
        "transfer_kv_per_layer_mla_pf_lf",
        "transfer_kv_per_layer_pf_lf",
        "transfer_kv_per_layer_ph_lf",
    ),
}
SGL_KERNEL_OPS: dict = {}  # torch versions of sgl_kernel ops, for releases that import them (cpu_ops.py)


@dataclass
class Shim:
    name: str
    anchor: tuple  # (file under sglang/, code fragment) of the upstream call it passes
    targets: tuple  # dotted names replaced, wrapped or provided
    why: str
    install: Callable[[], None]
    uses: str | None = None  # SGLang's own version a rerouted op runs
    provides: bool = False  # the targets do not exist before (an import stand-in, a missing name)

    def lines(self, pkg_dir: str) -> list:
        """``sglang/<file>:<line>`` of every line holding the anchor fragment in this release."""
        rel, fragment = self.anchor
        path = os.path.join(pkg_dir, rel)
        if not os.path.isfile(path):
            return []
        with open(path) as f:
            return [f"sglang/{rel}:{i}" for i, line in enumerate(f, 1) if fragment in line]


def _cuda_synchronize() -> None:
    import torch

    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda device=None: None


def _record_stream() -> None:
    import torch

    original = torch.Tensor.record_stream

    def record_stream(self, stream):
        return None if self.device.type == "cpu" else original(self, stream)

    torch.Tensor.record_stream = record_stream


def _tree_ops() -> dict:
    path = os.environ.get(SPEC_TREE_ENV)
    if not path or not os.path.isfile(path):
        raise ImportError(f"{SPEC_TREE_ENV}={path!r}: SGLang 0.5.23's kernels/ops/speculative/spec_tree.py is needed")
    return load_functions(path, TREE_NAMES)


def _tree_build() -> None:
    from sglang.srt.speculative import eagle_utils

    eagle_utils.sgl_build_tree_kernel_efficient = _tree_ops()["sgl_build_tree_kernel_triton"]


def _tree_verify() -> None:
    from sglang.srt.speculative import eagle_utils

    triton_verify = _tree_ops()["verify_tree_greedy_triton"]

    def verify_tree_greedy_func(
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        retrieve_index,
        retrieve_next_token,
        retrieve_next_sibling,
        target_predict,
        topk=-1,
    ):
        triton_verify(
            predicts=predicts,
            accept_index=accept_index,
            accept_token_num=accept_token_num,
            candidates=candidates,
            retrieve_index=retrieve_index,
            retrieve_next_token=retrieve_next_token,
            retrieve_next_sibling=retrieve_next_sibling,
            target_predict=target_predict,
        )
        return predicts, accept_index, accept_token_num

    eagle_utils.verify_tree_greedy_func = verify_tree_greedy_func


def _extend_cache_locs() -> None:
    import torch
    from sglang.srt.speculative.triton_ops import cache_locs

    original = cache_locs.assign_extend_cache_locs_func

    def assign_extend_cache_locs_func(
        req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device
    ):
        if torch.device(device).type != "cpu":
            return original(
                req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device
            )
        out_cache_loc = torch.empty((batch_size * draft_token_num,), dtype=torch.int64, device=device)
        cache_locs.assign_extend_cache_locs[(batch_size,)](
            req_pool_indices,
            req_to_token,
            start_offset,
            end_offset,
            out_cache_loc,
            req_to_token.shape[1],
            cache_locs.next_power_of_2(batch_size),
        )
        return out_cache_loc

    cache_locs.assign_extend_cache_locs_func = assign_extend_cache_locs_func


# The torch functions the two device shims redirect (``in_release.devices``, the replays' redirect too).
PIN_MEMORY_FUNCTIONS = ("tensor", "empty", "zeros", "full")
CUDA_DEVICE_FUNCTIONS = ("tensor", "empty", "zeros", "ones", "full", "arange")


def _pin_memory() -> None:
    import torch

    from .devices import CudaToCpu  # on use: torch is imported when the shims are installed

    if not torch.cuda.is_available():
        CudaToCpu(PIN_MEMORY_FUNCTIONS, ("pin_memory",), device=False).install()


def _cuda_device_factories() -> None:
    import torch

    from .devices import CudaToCpu  # on use, as in _pin_memory

    if not torch.cuda.is_available():
        CudaToCpu(CUDA_DEVICE_FUNCTIONS, (), pin_memory=False).install()


def _cpu_collectives() -> None:
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    gather, scatter = GroupCoordinator.all_gather_into_tensor, GroupCoordinator.reduce_scatter_tensor

    def all_gather_into_tensor(self, output, input):
        return (
            self._all_gather_into_tensor(output, input) if input.device.type == "cpu" else gather(self, output, input)
        )

    def reduce_scatter_tensor(self, output, input):
        return (
            self._reduce_scatter_tensor(output, input) if input.device.type == "cpu" else scatter(self, output, input)
        )

    GroupCoordinator.all_gather_into_tensor = all_gather_into_tensor
    GroupCoordinator.reduce_scatter_tensor = reduce_scatter_tensor


def _sgl_kernel_cpu_ops() -> None:
    SGL_KERNEL_OPS.update(_cpu_ops())


def _sgl_kernel_standin() -> None:
    import importlib.util

    if importlib.util.find_spec("sgl_kernel") is None:
        sys.meta_path.append(SglKernelFinder(SGL_KERNEL_OPS, SGL_KERNEL_STUBS))


SHIMS = (
    Shim(
        "sgl-kernel-import-standin",
        ("srt/mem_cache/memory_pool_host.py", "from sgl_kernel.kvcacheio import"),
        ("sgl_kernel",),
        "sgl_kernel (CUDA / CPU-AMX wheels) is imported at module import for paths this lane never runs "
        "(HiCache host transfers). An in-memory import stand-in: each of those names raises StandInError if "
        "called; every other name stays missing, so SGLang's own ImportError fallbacks behave as without it.",
        _sgl_kernel_standin,
        provides=True,
    ),
    Shim(
        "sgl-kernel-cpu-ops",
        ("kernels/ops/kvcache/cache_move.py", "from sgl_kernel import copy_all_layer_kv_cache_cpu"),
        tuple(
            f"sgl_kernel.{n}"
            for n in (
                "copy_all_layer_kv_cache_cpu",
                "assign_req_to_token_pool_cpu",
                "fill_bonus_tokens_cpu",
                "fill_accept_out_cache_loc_cpu",
                "build_tree_kernel_efficient_cpu",
                "verify_tree_greedy_cpu",
                "assign_draft_cache_locs_contiguous_cpu",
                "assign_extend_cache_locs_cpu",
                "rotate_input_ids_cpu",
            )
        ),
        "from 0.5.23 the CPU engine imports sgl_kernel's CPU/AMX ops at module import and calls them on CPU; "
        "that build of sgl_kernel is not installable here. The stand-in provides them (cpu_ops.py).",
        _sgl_kernel_cpu_ops,
        uses="each calling function's own other branch: the same module's Triton kernel (allocation, eagle, "
        "spec_tree, cache_locs); copy_all_layer_kv_cache's byte gather-then-scatter done with ctypes (the "
        "interpreter cannot follow its raw pointers); rotate_input_ids (multi-layer EAGLE only) raises",
        provides=True,
    ),
    Shim(
        "cuda-synchronize",
        ("srt/models/llama.py", "torch.cuda.synchronize()"),
        ("torch.cuda.synchronize",),
        "the EAGLE3 head takes the target's embedding through set_embed, which ends with "
        "torch.cuda.synchronize(); a CPU-only torch raises. With no GPU there is no stream to wait for.",
        _cuda_synchronize,
    ),
    Shim(
        "record-stream-cpu",
        ("srt/managers/overlap_utils.py", "record_stream(torch.get_device_module"),
        ("torch.Tensor.record_stream",),
        "the overlap scheduler marks index tensors as used by the current stream; CPU tensors have no "
        "caching allocator to tell and torch raises 'unknown parameter type'. A no-op for CPU tensors only.",
        _record_stream,
    ),
    Shim(
        "tree-build-triton",
        ("srt/speculative/eagle_utils.py", "sgl_build_tree_kernel_efficient("),
        ("sglang.srt.speculative.eagle_utils.sgl_build_tree_kernel_efficient",),
        "the draft tree is built by sgl_kernel's op, imported only on CUDA/HIP/MUSA: on CPU the name is "
        "undefined (NameError). Provides that name.",
        _tree_build,
        uses="sglang 0.5.23 kernels/ops/speculative/spec_tree.py sgl_build_tree_kernel_triton "
        "(its XPU path), in the Triton interpreter",
        provides=True,
    ),
    Shim(
        "tree-verify-triton",
        ("srt/speculative/eagle_utils.py", "def verify_tree_greedy_func("),
        ("sglang.srt.speculative.eagle_utils.verify_tree_greedy_func",),
        "greedy tree verification has CUDA and NPU branches only: on CPU it silently returns its inputs "
        "(nothing accepted, every prediction 0). Replaced before any module imports it by name.",
        _tree_verify,
        uses="sglang 0.5.23 kernels/ops/speculative/spec_tree.py verify_tree_greedy_triton "
        "(its XPU path), in the Triton interpreter",
    ),
    Shim(
        "extend-cache-locs-cpu",
        ("srt/speculative/triton_ops/cache_locs.py", "def assign_extend_cache_locs_func("),
        ("sglang.srt.speculative.triton_ops.cache_locs.assign_extend_cache_locs_func",),
        "the verify pass gathers its KV slots with the module's Triton kernel on CUDA/HIP/MUSA and an NPU op; "
        "on CPU the function falls through and returns None.",
        _extend_cache_locs,
        uses="the same module's Triton kernel assign_extend_cache_locs, launched as its CUDA branch launches it",
    ),
    Shim(
        "pin-memory-cpu",
        ("srt/model_executor/forward_batch_info.py", "pin_memory=True"),
        (*(f"torch.{n}" for n in PIN_MEMORY_FUNCTIONS), "torch.Tensor.pin_memory"),
        "DP attention's token-count sync stages its counts in pinned host memory for the copy to the GPU; a "
        "CPU-only torch has no pinned allocator and raises. With no GPU pin_memory is dropped (same values); "
        "the DP padding code is not touched.",
        _pin_memory,
    ),
    Shim(
        "cuda-device-factories",
        ("srt/speculative/eagle_info.py", 'device="cuda"'),
        tuple(f"torch.{n}" for n in CUDA_DEVICE_FUNCTIONS),
        'idle ranks\' spec inputs are built with a hard-coded device="cuda"; a CPU-only torch raises. With no '
        "GPU torch's tensor factories put such tensors on the CPU (same shape, dtype, values); the spec-input "
        "classes are not touched, so what they declare (and lack) is unchanged.",
        _cuda_device_factories,
    ),
    Shim(
        "cpu-collectives",
        ("srt/distributed/parallel_state.py", "reg_all_gather_into_tensor(output"),
        (
            "sglang.srt.distributed.parallel_state.GroupCoordinator.all_gather_into_tensor",
            "sglang.srt.distributed.parallel_state.GroupCoordinator.reduce_scatter_tensor",
        ),
        "DP attention's gathers go through custom torch ops registered for CUDA only (NotImplementedError on "
        "CPU tensors).",
        _cpu_collectives,
        uses="the group's own torch.distributed path (_all_gather_into_tensor / "
        "_reduce_scatter_tensor), as the NPU/XPU branch of the same methods calls it (gloo here)",
    ),
)
# Settings, not code: SGLang's own environment variables the launcher sets for every rank.
SETTINGS = {
    "SGLANG_USE_CPU_ENGINE": "1: is_cpu() true; without AMX every layer takes its torch forward_native",
    "TRITON_INTERPRET": "1: the triton backend's kernels run in Triton's interpreter on CPU tensors",
    "SGLANG_CPU_OMP_THREADS_BIND": "cores per rank (model_runner init_threads_binding refuses tp > NUMA nodes "
    "without it)",
    "TORCH_COMPILE_DISABLE": "1: torch.compile'd helpers (spec_utils.select_top_k_tokens) run eagerly; inductor's "
    "C++ build took two thirds of a run's generation time here, in every rank process",
}


def apply(version: str) -> list:
    """Install the shims whose anchor this release has; return their records (lines, installed, reason)."""
    import sglang

    pkg_dir = os.path.dirname(os.path.abspath(sglang.__file__))
    out = []
    for shim in SHIMS:
        lines = shim.lines(pkg_dir)
        entry = {
            "name": shim.name,
            "upstream": lines,
            "targets": list(shim.targets),
            "why": shim.why,
            "uses": shim.uses,
            "installed": bool(lines),
        }
        if lines:
            shim.install()
        else:
            entry["reason"] = f"not needed in sglang {version}: {shim.anchor[0]} has no {shim.anchor[1]!r}"
        out.append(entry)
    return out
