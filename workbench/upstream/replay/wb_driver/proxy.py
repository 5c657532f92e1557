"""The recording proxy a traced replay hands the backend as ``spec_info``.

It answers every attribute from the real instance (values, methods, properties), raises the
instance's own ``AttributeError`` for what the real class lacks, and records each read in order
with the sglang line that made it. ``isinstance(proxy, Cls)`` holds exactly when it holds for the
real instance (``__class__`` answers the real class). Writes go to the real instance.
"""

from __future__ import annotations

from ...in_release.stubs import caller

_OWN = frozenset({"_wb_target", "_wb_reads"})


class SpecProxy:
    """Wraps `target`; `reads` lists {"attr", "at", "missing"} in the order the backend made them."""

    __slots__ = ("_wb_target", "_wb_reads")

    def __init__(self, target):
        object.__setattr__(self, "_wb_target", target)
        object.__setattr__(self, "_wb_reads", [])

    def __getattribute__(self, name: str):
        if name in _OWN:
            return object.__getattribute__(self, name)
        target = object.__getattribute__(self, "_wb_target")
        if name == "__class__":
            return type(target)
        if name.startswith("__") and name.endswith("__"):
            return getattr(target, name)
        reads = object.__getattribute__(self, "_wb_reads")
        entry = {"attr": name, "at": caller(), "missing": False}
        reads.append(entry)
        try:
            return getattr(target, name)
        except AttributeError:
            entry["missing"] = True
            raise

    def __setattr__(self, name: str, value) -> None:
        setattr(object.__getattribute__(self, "_wb_target"), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(object.__getattribute__(self, "_wb_target"), name)

    def __repr__(self) -> str:
        return f"SpecProxy({object.__getattribute__(self, '_wb_target')!r})"


def reads_of(proxy: SpecProxy) -> list[dict]:
    """The reads the proxy recorded, in order."""
    return list(object.__getattribute__(proxy, "_wb_reads"))
