"""Which replays decide a set of findings: one case per (backend class, forward mode, spec class).

A case replays the backend class's real ``init_forward_metadata`` on a batch of the finding's mode
whose ``spec_info`` is the spec class, watching every read line of the findings it decides.
Backends whose metadata runs on CPU (``REAL``: triton under the Triton interpreter, torch_native)
are replayed on real objects; every other backend is *traced*: the GPU libraries are stubbed
(every library of ``GPU_LIBRARIES``, so that a backend importing another backend's module sees the
same stubs; a library found missing at import is stubbed too) and ``spec_info`` is wrapped in the
recording proxy. MLA backends get a tiny DeepSeek-V3 model config and the real
``MLATokenToKVPool``, hybrid linear-attention backends a tiny NemotronH (one Mamba layer) and the
real ``HybridReqToTokenPool``, the others a tiny Llama and ``MHATokenToKVPool``. An IDLE finding gets a
second case, the unpadded idle batch, through the release's own idle runner path.
"""

from __future__ import annotations

REAL = frozenset({"triton", "torch_native"})
GPU_LIBRARIES = {
    "flashinfer": ("flashinfer",),
    "flashinfer_mla": ("flashinfer",),
    "trtllm_mha": ("flashinfer",),
    "trtllm_mla": ("flashinfer",),
    "aiter": ("aiter",),
    "wave": ("wave_lang",),
    "flashattention": ("sgl_kernel",),
    "flashmla": ("sgl_kernel",),
    "cutlass_mla": ("sgl_kernel",),
    "intel_amx": ("sgl_kernel", "torch.ops.sgl_kernel"),
}
SEED_CASE = {
    "backend_module": "sglang.srt.layers.attention.triton_backend",
    "backend_class": "TritonAttnBackend",
    "mode": "IDLE",
    "batch": "IDLE padded",
    "spec_module": "sglang.srt.speculative.eagle_info",
    "spec_class": "EagleDraftExtendInput",
    "watch": [],
}


def module_of(path: str) -> str:
    """`sglang/srt/speculative/eagle_info.py` -> `sglang.srt.speculative.eagle_info`."""
    return path[:-3].replace("/", ".")


def batch_kind(mode: str, padded: bool = True) -> str:
    """The batch a forward mode is replayed with (the driver's ``batches.kind_of``)."""
    if mode == "IDLE":
        return "IDLE padded" if padded else "IDLE unpadded"
    if "DECODE" in mode and not mode.startswith("DRAFT_EXTEND"):
        return "DECODE"
    return mode


def profile_of(backend: str) -> str:
    """The driver's model profile for a backend: MLA, hybrid Mamba (linear attention) or MHA."""
    if "mla" in backend:
        return "mla"
    return "mamba" if backend in ("hybrid_linear_attn", "mamba") else "mha"


def case_key(f: dict, kind: str | None = None) -> str:
    """`backend_file:backend_class|batch kind|spec_class` of the case that decides finding `f`."""
    return f"{f['backend_file']}:{f['backend_class']}|{kind or batch_kind(f['mode'])}|{f['spec_class']}"


def plan(findings: list[dict]) -> list[dict]:
    """The cases deciding `findings` (each with its key, what to watch, whether it is traced)."""
    cases: dict[str, dict] = {}
    for f in findings:
        kinds = [batch_kind(f["mode"])] + (["IDLE unpadded"] if f["mode"] == "IDLE" else [])
        for kind in kinds:
            key = case_key(f, kind)
            case = cases.setdefault(
                key,
                {
                    "key": key,
                    "backend_module": module_of(f["backend_file"]),
                    "backend_class": f["backend_class"],
                    "backend": f["backend"],
                    "mode": f["mode"],
                    "batch": kind,
                    "spec_module": module_of(f["spec_class_file"]),
                    "spec_class": f["spec_class"],
                    "trace": f["backend"] not in REAL,
                    "stub": sorted({lib for libs in GPU_LIBRARIES.values() for lib in libs})
                    if f["backend"] not in REAL
                    else [],
                    "model": profile_of(f["backend"]),
                    "watch": [],
                },
            )
            loc = f"{f['read_file']}:{f['read_line']}"
            if loc not in case["watch"]:
                case["watch"].append(loc)
    # real cases first: a library stubbed for a traced case stays stubbed in the driver process
    return sorted(cases.values(), key=lambda c: (c["trace"], c["key"]))
