"""Records to and from JSON: the one place a dataclass record becomes a dict and back.

``to_dict(record)`` writes every field (nested dataclasses, lists and dicts of them too);
``from_dict(cls, data)`` reads one back strictly: an unknown key, a missing required field or a
value of the wrong type raises ``RecordError`` naming the field's path (``RuntimeRecord.crash.rank``)
and what it expected. Dicts belong at the edge (JSON in and out); the code in between reads fields.

Supported field types: ``str``, ``int``, ``float`` (an int is accepted), ``bool``, ``None``,
``X | None`` and other unions, ``Literal[...]``, ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``,
bare ``dict`` / ``list`` (any JSON inside), ``Any`` and nested dataclasses.

A key that only some records of a class carry (a field a later step adds) is a field whose default
is ``ABSENT`` (``absent_key()``): ``from_dict`` leaves it ``ABSENT`` when the key is missing, and
``to_dict`` leaves the key out while it is ``ABSENT``, so such a record writes back key for key.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class RecordError(ValueError):
    """A dict that does not fit its record class; the message names the field."""


class _Absent:
    """The value of a field whose key the record does not carry (false, like None)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def absent_key() -> Any:
    """A dataclass field that is ``ABSENT`` unless set: ``to_dict`` writes its key only once it is set."""
    return dataclasses.field(default=ABSENT)


def to_dict(record: Any) -> dict:
    """The JSON-ready dict of a dataclass record (field order kept)."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"to_dict takes a dataclass instance, not {type(record).__name__}")
    return {
        f.name: _plain(value) for f in dataclasses.fields(record) if (value := getattr(record, f.name)) is not ABSENT
    }


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_dict(cls: type[T], data: Any, where: str | None = None) -> T:
    """The ``cls`` record of ``data``; ``RecordError`` (naming the field) when it does not fit."""
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object (dict), got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise RecordError(f"{where}: unknown key(s) {unknown}; valid: {sorted(fields)}")
    missing = sorted(
        n
        for n, f in fields.items()
        if n not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise RecordError(f"{where}: missing required field(s) {missing}")
    hints = _hints(cls)
    return cls(**{n: _value(hints[n], v, f"{where}.{n}") for n, v in data.items()})


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _value(tp: Any, value: Any, where: str) -> Any:
    """``value`` checked (and, for dataclasses, built) against the annotation ``tp``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if tp is None or tp is type(None):
        if value is not None:
            raise RecordError(f"{where}: expected null, got {value!r}")
        return None
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _value(arg, value, where)
            except RecordError as e:
                errors.append(str(e))
        raise RecordError(f"{where}: {value!r} fits none of {_describe(tp)} ({'; '.join(errors)})")
    if origin is typing.Literal:
        if value not in args:
            raise RecordError(f"{where}: invalid value {value!r}; valid: {', '.join(map(repr, args))}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if tp in (list, dict, tuple) or origin in (list, dict, tuple):
        return _container(origin or tp, args, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecordError(f"{where}: expected a number, got {value!r}")
        return value
    if tp in (str, int, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise RecordError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise TypeError(f"{where}: field type {_describe(tp)} is not supported by workbench.run.serialise")


def _container(kind: type, args: tuple, value: Any, where: str) -> Any:
    if kind is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object (dict), got {value!r}")
        if not args:
            return value
        return {k: _value(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if not isinstance(value, list | tuple):
        raise RecordError(f"{where}: expected a list, got {value!r}")
    if not args:
        return list(value)
    item = args[0]
    out = [_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return tuple(out) if kind is tuple else out
