"""Byte-level tokenizer: ids 0..255 are bytes, 256 is end-of-text."""

from __future__ import annotations

EOS_ID = 256
VOCAB_SIZE = 257


def encode(text: str) -> list[int]:
    """UTF-8 bytes of ``text`` as token ids."""
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    """Token ids back to text; end-of-text ends the string, bad UTF-8 is replaced."""
    out = bytearray()
    for i in ids:
        if i == EOS_ID:
            break
        out.append(int(i))
    return out.decode("utf-8", errors="replace")
