"""The fixes the real runtime can apply, as patches inside the rank processes.

Runs inside the release environment (no workbench import); the workbench names the fixes from
``FIXES`` (``workbench.upstream.runtime.release_launch`` reads this file's table without importing it).

- ``verify-input``: the smallest fix for the verify-pass crash on an idle DP rank
  (``'EagleVerifyInput' object has no attribute 'kv_indptr'``): ``kv_indptr: Optional[torch.Tensor]
  = None`` declared on ``EagleVerifyInput``, so the triton backend's idle branch takes the seq_lens
  fallback, as it does for a spec input that declares the field.
- ``pr-28221``: PR #28221's fix, the same field on ``EagleDraftExtendInput``.
- ``triton-idle-fallback``: the triton backend's seq_lens fallback for a decode/idle batch whose
  spec input carries ``kv_indptr = None`` (``if spec_info is None or spec_info.kv_indptr is None``),
  which 0.5.13 added; 0.5.12 and earlier test ``spec_info is None`` only, so every padded idle batch
  with a spec input reads its ``kv_indptr`` (the idle draft pass raises ``'NoneType' object has no
  attribute 'shape'``), and #28221's field alone cannot help there. A backport, named as one.
- ``torch-native-fill-value``: the smallest fix for DP attention on torch_native, whose first
  DP-padded batch raises ``NotImplementedError`` because ``_pad_inputs_to_size`` asks the backend for
  ``get_cuda_graph_seq_len_fill_value`` and ``TorchNativeAttnBackend`` inherits the base class's
  ``raise``: the method defined on it returning 1, the value the triton backend returns.
- ``eagle-idle-batch``: the smallest fix for EAGLE (EAGLE-1) drafts on an idle DP rank, two changes.
  Its empty draft-extend batch reaches the Llama layer's rotary ``view(num_tokens, -1, head_size)`` with 0
  rows (``RuntimeError: cannot reshape tensor of 0 elements``): ``llama.LlamaAttention.forward`` returns its
  (empty) input for a batch of 0 rows, so the decoder layer skips only the attention, as
  ``Qwen3DecoderLayer.forward`` does (``if hidden_states.shape[0] != 0:``); the layer's stage boundaries
  still run. Past that, the draft's own embedding reduces over the full TP group (``llama_eagle`` builds
  its ``VocabParallelEmbedding`` without ``use_attn_tp_group``), and an empty batch skips that collective
  (``vocab_parallel_embedding.py``: only attention-TP peers may), so the busy rank's all-reduce met the
  idle rank's next collective (gloo aborted the idle rank, exit -6): ``llama_eagle.LlamaModel`` builds
  its embedding with ``use_attn_tp_group=is_dp_attention_enabled()``, as ``qwen2.Qwen2Model`` does.
- ``llama-attn-tp``: the smallest fix for the EAGLE-1 draft's first decode pass under DP attention at DP 3
  (``ZeroDivisionError`` in ``decode_attention.py``'s ``_grouped_head_tiles``, any rank, idle or not). The
  draft keeps the target's layout (``draft_parallel.legacy_draft_parallel_spec``: TARGET_LAYOUT for EAGLE),
  so ``llama.LlamaAttention`` splits its heads over the full TP group (``get_parallel().tp_size``) while the
  draft's KV pool holds the attention-TP group's heads (``get_num_kv_heads(attn_tp_size)``): 2 q heads per
  rank over a pool of 3 kv heads gives ``kv_group_num`` 0. ``LlamaAttention.__init__`` takes its heads and
  its qkv/o projections from the attention-TP group, as ``qwen3.Qwen3Attention`` does: the release's own
  method source with ``attn_tp_source``'s three edits (the same edits ``report.py`` writes as the diff),
  compiled in the module's globals.

The field fixes add the field to the real dataclass in place (annotation, class default, the
dataclass re-generated with its own parameters); the fallback wraps
``TritonAttnBackend.init_forward_metadata``: for such a batch it calls the release's own method with
``spec_info`` set aside, so the release's seq_lens branch builds the metadata, and otherwise calls it
unchanged (a spec input without the attribute still raises in the release's line). Each is applied
before the scheduler is built; a release that already has the fix is left alone and the record says
so. ``changes`` lists what the applied fixes changed, for the live shim guard.
"""

import dataclasses
import importlib
import inspect
import textwrap

FIELD = "kv_indptr"
MODULE = "sglang.srt.speculative.eagle_info"
BACKEND_MODULE = "sglang.srt.layers.attention.triton_backend"
TORCH_NATIVE_MODULE = "sglang.srt.layers.attention.torch_native_backend"
FIXES = {
    "verify-input": ("EagleVerifyInput", "the verify pass's idle input gets kv_indptr = None (seq_lens fallback)"),
    "pr-28221": ("EagleDraftExtendInput", "PR #28221: the draft-extend input gets kv_indptr = None"),
    "triton-idle-fallback": (
        "TritonAttnBackend.init_forward_metadata",
        "0.5.13's seq_lens fallback for a decode/idle spec input with kv_indptr None, backported to the triton backend",
    ),
    "torch-native-fill-value": (
        "TorchNativeAttnBackend.get_cuda_graph_seq_len_fill_value",
        "torch_native's DP padding fill value defined (1, as the triton backend's)",
    ),
    "eagle-idle-batch": (
        "LlamaAttention.forward",
        "an empty (idle DP rank) batch skips the Llama attention (its rotary cannot view 0 rows), as "
        "Qwen3DecoderLayer's guard does; the EAGLE-1 draft's embedding reduces within the attention-TP group "
        "under DP attention, as Qwen2Model's does",
    ),
    "llama-attn-tp": (
        "LlamaAttention.__init__",
        "the Llama attention (the EAGLE-1 draft's) splits its heads and its qkv/o projections within the "
        "attention-TP group, as Qwen3Attention does, so its heads per rank match the KV pool's",
    ),
}
FILL_VALUE = "torch-native-fill-value"
LLAMA_MODULE = "sglang.srt.models.llama"
EAGLE_MODULE = "sglang.srt.models.llama_eagle"
EAGLE_IDLE_GUARD = "hidden_states.shape[0] == 0"  # the test the fix adds, looked for in the release's method
EAGLE_IDLE = "eagle-idle-batch"
FALLBACK = "triton-idle-fallback"
ATTN_TP = "llama-attn-tp"
# attn_tp_source's edits, each on the one line of LlamaAttention.__init__ that reads the first (stripped):
# the line replaced by the second, or (third True) the second inserted after it, at the line's indent.
ATTN_TP_EDITS = (
    ("tp_size = get_parallel().tp_size", "tp_size = get_parallel().attn_tp_size", False),
    ('prefix=add_prefix("qkv_proj", prefix),', 'parallel_group="attn_tp",', True),
    ('prefix=add_prefix("o_proj", prefix),', 'parallel_group="attn_tp",', True),
)
ATTN_TP_TEST = "get_parallel().attn_tp_size"  # the fixed line, looked for in the release's method
FALLBACK_TEST = "spec_info.kv_indptr is None"  # the release's own test, where it has one
_MISSING = object()
_GENERATED = (
    "__init__",
    "__repr__",
    "__eq__",
    "__hash__",
    "__dataclass_fields__",
    "__dataclass_params__",
    "__match_args__",
)
_PARAMS = ("init", "repr", "eq", "order", "unsafe_hash", "frozen")


def declares(cls) -> bool:
    """Whether ``cls`` declares ``kv_indptr`` as a dataclass field."""
    return FIELD in getattr(cls, "__dataclass_fields__", {})


def add_field(cls) -> None:
    """``kv_indptr: Optional[torch.Tensor] = None`` appended to the dataclass ``cls``, in place."""
    params = cls.__dataclass_params__
    kwargs = {p: getattr(params, p) for p in _PARAMS if hasattr(params, p)}
    own = cls.__dict__.get("__annotations__", {})
    for f in cls.__dataclass_fields__.values():
        if f.default_factory is not dataclasses.MISSING:  # its class attribute was removed; re-running needs it
            setattr(cls, f.name, f)
            continue
        # A required field declared with field() lost its class attribute when the dataclass was built;
        # re-built, it would take an inherited class attribute as its default (0.5.23's
        # EagleVerifyInput.custom_mask over SpecInput's None), so it gets its field() back.
        required = f.default is dataclasses.MISSING
        if f.name in own and required and f.name not in cls.__dict__ and hasattr(cls, f.name):
            setattr(cls, f.name, _field_like(f))
    cls.__annotations__[FIELD] = "Optional[torch.Tensor]"
    setattr(cls, FIELD, None)
    for name in _GENERATED:
        if name in cls.__dict__:
            delattr(cls, name)
    dataclasses.dataclass(cls, **kwargs)


def _field_like(f: dataclasses.Field) -> dataclasses.Field:
    """A new ``field()`` with ``f``'s parameters (no default)."""
    kwargs = {k: getattr(f, k) for k in ("init", "repr", "hash", "compare", "metadata")}
    if getattr(f, "kw_only", dataclasses.MISSING) is not dataclasses.MISSING:
        kwargs["kw_only"] = f.kw_only
    return dataclasses.field(**kwargs)


def has_fallback(cls) -> bool:
    """Whether ``cls.init_forward_metadata`` (its source) already tests ``spec_info.kv_indptr is None``."""
    return FALLBACK_TEST in inspect.getsource(cls.init_forward_metadata)


def add_fallback(cls) -> None:
    """Wrap ``cls.init_forward_metadata`` with the seq_lens fallback for a decode/idle spec input whose
    ``kv_indptr`` is None (module docstring)."""
    original = cls.init_forward_metadata

    def init_forward_metadata(self, forward_batch):
        spec_info = forward_batch.spec_info
        if (
            spec_info is not None
            and forward_batch.forward_mode.is_decode_or_idle()
            and getattr(spec_info, FIELD, _MISSING) is None
        ):
            forward_batch.spec_info = None
            try:
                return original(self, forward_batch)
            finally:
                forward_batch.spec_info = spec_info
        return original(self, forward_batch)

    init_forward_metadata.__qualname__ = f"{cls.__name__}.init_forward_metadata"
    cls.init_forward_metadata = init_forward_metadata


def _apply_fallback(name: str, what: str) -> dict:
    cls = importlib.import_module(BACKEND_MODULE).TritonAttnBackend
    present = has_fallback(cls)
    if not present:
        add_fallback(cls)
    return {
        "fix": name,
        "class": f"{BACKEND_MODULE}.TritonAttnBackend",
        "what": what,
        "applied": not present,
        "note": "the release already has the fallback" if present else "init_forward_metadata wrapped in place",
    }


def get_cuda_graph_seq_len_fill_value(self):
    """The seq_len of a DP-padded row (the fix ``torch-native-fill-value``): 1, as the triton backend's."""
    return 1


def _apply_fill_value(name: str, what: str) -> dict:
    cls = importlib.import_module(TORCH_NATIVE_MODULE).TorchNativeAttnBackend
    present = "get_cuda_graph_seq_len_fill_value" in vars(cls)
    if not present:
        get_cuda_graph_seq_len_fill_value.__qualname__ = f"{cls.__name__}.get_cuda_graph_seq_len_fill_value"
        cls.get_cuda_graph_seq_len_fill_value = get_cuda_graph_seq_len_fill_value
    return {
        "fix": name,
        "class": f"{TORCH_NATIVE_MODULE}.TorchNativeAttnBackend",
        "what": what,
        "applied": not present,
        "note": "the release already defines it" if present else "method defined on the class",
    }


def _apply_eagle_idle(name: str, what: str) -> dict:
    cls = importlib.import_module(LLAMA_MODULE).LlamaAttention
    original = cls.forward
    present = EAGLE_IDLE_GUARD in inspect.getsource(original)

    def forward(self, positions, hidden_states, forward_batch, *args, **kwargs):
        if hidden_states.shape[0] == 0:  # an idle DP rank's empty batch: no attention, the rows (none) unchanged
            return hidden_states
        return original(self, positions, hidden_states, forward_batch, *args, **kwargs)

    if not present:
        forward.__qualname__ = f"{cls.__name__}.forward"
        cls.forward = forward
    embed_present = _apply_eagle_embedding()
    return {
        "fix": name,
        "class": f"{LLAMA_MODULE}.LlamaAttention, {EAGLE_MODULE}.LlamaModel",
        "what": what,
        "applied": not present or not embed_present,
        "attention_applied": not present,
        "embedding_applied": not embed_present,
        "note": "wrapped in place: "
        + ", ".join(n for n, done in (("forward", not present), ("__init__", not embed_present)) if done)
        if not present or not embed_present
        else "the release already skips an empty batch and reduces the embedding within attention TP",
    }


def _apply_eagle_embedding() -> bool:
    """``llama_eagle.LlamaModel.__init__`` wrapped: under DP attention its ``embed_tokens`` is built again with
    ``use_attn_tp_group=True`` (before any weight is loaded). Whether the release already does so."""
    module = importlib.import_module(EAGLE_MODULE)
    cls = module.LlamaModel
    original = cls.__init__
    if "use_attn_tp_group" in inspect.getsource(original):
        return True
    dp_attention = importlib.import_module("sglang.srt.layers.dp_attention")

    def __init__(self, config, quant_config=None, prefix=""):
        original(self, config, quant_config=quant_config, prefix=prefix)
        if dp_attention.is_dp_attention_enabled():  # each DP rank embeds only its own tokens
            self.embed_tokens = module.VocabParallelEmbedding(
                config.vocab_size,
                config.hidden_size,
                use_attn_tp_group=True,
                prefix=module.add_prefix("embed_tokens", prefix),
            )

    __init__.__qualname__ = f"{cls.__name__}.__init__"
    cls.__init__ = __init__
    return False


def attn_tp_source(text: str) -> str:
    """``text`` (the lines of ``LlamaAttention.__init__``) with ``ATTN_TP_EDITS`` made; ValueError naming the
    line unless each is there exactly once."""
    lines = text.splitlines(keepends=True)
    for code, new, insert in ATTN_TP_EDITS:
        found = [i for i, line in enumerate(lines) if line.strip() == code]
        if len(found) != 1:
            raise ValueError(f"LlamaAttention.__init__: {code!r} is there {len(found)} time(s), not once")
        line = lines[found[0]]
        indent = line[: len(line) - len(line.lstrip())]
        edited = [line, f"{indent}{new}\n"] if insert else [f"{indent}{new}\n"]
        lines[found[0] : found[0] + 1] = edited
    return "".join(lines)


def _apply_attn_tp(name: str, what: str) -> dict:
    module = importlib.import_module(LLAMA_MODULE)
    cls = module.LlamaAttention
    filename = f"<fix {name}: {LLAMA_MODULE}.LlamaAttention.__init__ edited>"
    done = cls.__init__.__code__.co_filename == filename  # this fix's own code, applied before
    present = not done and ATTN_TP_TEST in inspect.getsource(cls.__init__)
    if not done and not present:
        # The method's own source with the edits, compiled in the module's globals; the enclosing function
        # supplies the __class__ cell its zero-argument super() needs.
        body = textwrap.indent(attn_tp_source(textwrap.dedent(inspect.getsource(cls.__init__))), "    ")
        made: dict = {}
        code = f"def _build(__class__):\n{body}    return __init__\n"
        exec(compile(code, filename, "exec"), vars(module), made)  # noqa: S102 - the release's source, edited
        init = made["_build"](cls)
        init.__qualname__ = f"{cls.__name__}.__init__"
        cls.__init__ = init
    note = "__init__ replaced by its own source with the attention-TP edits"
    if done or present:
        note = "already applied in this process" if done else "the release already splits the heads within attention TP"
    return {
        "fix": name,
        "class": f"{LLAMA_MODULE}.LlamaAttention",
        "what": what,
        "applied": not done and not present,
        "note": note,
    }


def apply(names: list) -> list:
    """Apply the named fixes; return what each did (for the run record)."""
    unknown = [n for n in names if n not in FIXES]
    if unknown:
        raise ValueError(f"unknown fix {unknown}; known: {sorted(FIXES)}")
    out = []
    for name in names:
        target, what = FIXES[name]
        if name == FALLBACK:
            out.append(_apply_fallback(name, what))
            continue
        if name == FILL_VALUE:
            out.append(_apply_fill_value(name, what))
            continue
        if name == EAGLE_IDLE:
            out.append(_apply_eagle_idle(name, what))
            continue
        if name == ATTN_TP:
            out.append(_apply_attn_tp(name, what))
            continue
        cls = getattr(importlib.import_module(MODULE), target)
        present = declares(cls)
        if not present:
            add_field(cls)
        out.append(
            {
                "fix": name,
                "class": f"{MODULE}.{target}",
                "what": what,
                "applied": not present,
                "note": "the release already declares the field" if present else "field added in place",
                "declares_after": declares(cls),
            }
        )
    return out


def changes(applied: list) -> list:
    """Each change the applied fixes made, named as the live shim guard names it (module, Class.attr)."""
    out = []
    for a in applied:
        if not a["applied"]:
            continue
        if a["fix"] == FALLBACK:
            name, change = FIXES[FALLBACK][0], "method wrapped with the seq_lens fallback (this file's code)"
            out.append({"fix": FALLBACK, "module": BACKEND_MODULE, "name": name, "change": change})
        elif a["fix"] == FILL_VALUE:
            name, change = FIXES[FILL_VALUE][0], "method defined, returning 1 (this file's code)"
            out.append({"fix": FILL_VALUE, "module": TORCH_NATIVE_MODULE, "name": name, "change": change})
        elif a["fix"] == ATTN_TP:
            change = "__init__ replaced: the release's source with attn_tp_source's edits (heads, qkv/o on attn_tp)"
            out.append({"fix": ATTN_TP, "module": LLAMA_MODULE, "name": FIXES[ATTN_TP][0], "change": change})
        elif a["fix"] == EAGLE_IDLE:
            name, change = FIXES[EAGLE_IDLE][0], "forward wrapped: an empty batch returns its input (this file's code)"
            if a.get("attention_applied"):
                out.append({"fix": EAGLE_IDLE, "module": LLAMA_MODULE, "name": name, "change": change})
            if a.get("embedding_applied"):
                change = (
                    "__init__ wrapped: under DP attention embed_tokens uses the attention-TP group (this file's code)"
                )
                out.append({"fix": EAGLE_IDLE, "module": EAGLE_MODULE, "name": "LlamaModel.__init__", "change": change})
        else:
            change = f"dataclass field {FIELD}: Optional[torch.Tensor] = None added; its generated methods rebuilt"
            out.append({"fix": a["fix"], "module": MODULE, "name": f"{FIXES[a['fix']][0]}.{FIELD}", "change": change})
    return out
