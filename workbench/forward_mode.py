"""Forward modes and hidden-state capture modes, mirroring SGLang's ``ForwardMode``."""
from __future__ import annotations

import enum


class ForwardMode(enum.IntEnum):
    """What one forward pass computes."""

    EXTEND = 1  # prefill: new tokens attend to a (possibly empty) prefix, causal
    DECODE = 2  # one query token per row (plain decode, or one EAGLE draft step)
    TARGET_VERIFY = 3  # the target scores a draft tree under a custom mask
    DRAFT_EXTEND = 4  # the draft model runs over the tokens the target accepted
    IDLE = 5  # a DP rank with no work joins the collectives

    def is_extend(self) -> bool:
        """Modes whose queries are ragged runs of new tokens (prefill-like kernels)."""
        return self in (ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND, ForwardMode.TARGET_VERIFY)

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_idle(self) -> bool:
        return self == ForwardMode.IDLE

    def is_decode_or_idle(self) -> bool:
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)

    def is_target_verify(self) -> bool:
        return self == ForwardMode.TARGET_VERIFY

    def is_draft_extend(self) -> bool:
        return self == ForwardMode.DRAFT_EXTEND


class CaptureHiddenMode(enum.IntEnum):
    """Which hidden states a forward must return (EAGLE needs them)."""

    NULL = 0
    LAST = 1  # last token of every request
    FULL = 2  # every token
