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

    def is_draft_input(self) -> bool:
        return self.spec_input_type in (SpecInputType.EAGLE_DRAFT, SpecInputType.EAGLE_DRAFT_EXTEND)

    def is_verify_input(self) -> bool:
        return self.spec_input_type == SpecInputType.EAGLE_VERIFY
