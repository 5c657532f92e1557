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

    def is_idle(self) -> bool:
        return self == ForwardMode.IDLE

    def is_decode_or_idle(self) -> bool:
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)

    def is_target_verify(self) -> bool:
        return self == ForwardMode.TARGET_VERIFY


class CaptureHiddenMode(enum.IntEnum):
    """Which hidden states a forward must return (EAGLE needs them)."""

    NULL = 0
    LAST = 1  # last token of every request
    FULL = 2  # every token
