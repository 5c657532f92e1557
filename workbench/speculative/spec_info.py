"""The base of every spec-info object, mirroring SGLang's ``speculative/spec_info.py``."""

from __future__ import annotations

import enum


class SpecInputType(enum.IntEnum):
    EAGLE_DRAFT = 1
    EAGLE_VERIFY = 2
    EAGLE_DRAFT_EXTEND = 3


class SpecInput:
    """Base of every spec-info object; it declares no metadata fields of its own."""

    def __init__(self, spec_input_type: SpecInputType) -> None:
        self.spec_input_type = spec_input_type
