"""The one record serialiser (``workbench.run.serialise``): round trips, and strict reading that names
the bad field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import pytest

from workbench.run.serialise import ABSENT, RecordError, absent_key, from_dict, to_dict


@dataclass
class Inner:
    rank: int | None
    message: str


@dataclass
class Outer:
    status: Literal["ok", "crashed"]
    wall_s: float
    inner: Inner | None = None
    items: list[Inner] = field(default_factory=list)
    by_name: dict[str, int] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    flag: bool = False


def test_round_trip_through_json():
    rec = Outer("crashed", 1.5, Inner(0, "boom"), [Inner(None, "a")], {"x": 1}, {"any": [1, {"b": None}]}, True)
    data = json.loads(json.dumps(to_dict(rec)))
    assert data["inner"] == {"rank": 0, "message": "boom"}
    assert from_dict(Outer, data) == rec


def test_defaults_fill_absent_optional_fields():
    assert from_dict(Outer, {"status": "ok", "wall_s": 2}) == Outer("ok", 2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"status": "ok", "wall_s": 1, "colour": "red"}, "Outer: unknown key(s) ['colour']"),
        ({"status": "ok"}, "Outer: missing required field(s) ['wall_s']"),
        ({"status": "done", "wall_s": 1}, "Outer.status: invalid value 'done'; valid: 'ok', 'crashed'"),
        ({"status": "ok", "wall_s": "1"}, "Outer.wall_s: expected a number, got '1'"),
        ({"status": "ok", "wall_s": True}, "Outer.wall_s: expected a number, got True"),
        ({"status": "ok", "wall_s": 1, "inner": {"rank": "0", "message": "m"}}, "Outer.inner.rank"),
        ({"status": "ok", "wall_s": 1, "items": [{"rank": 1}]}, "Outer.items[0]: missing required field(s)"),
        ({"status": "ok", "wall_s": 1, "by_name": {"x": 1.5}}, "Outer.by_name['x']: expected int, got 1.5"),
        ({"status": "ok", "wall_s": 1, "flag": 1}, "Outer.flag: expected bool, got 1"),
        ({"status": "ok", "wall_s": 1, "items": {}}, "Outer.items: expected a list"),
    ],
)
def test_strict_reading_names_the_field(data, message):
    with pytest.raises(RecordError) as e:
        from_dict(Outer, data)
    assert message in str(e.value)


@dataclass
class Staged:
    name: str
    later: str | None = absent_key()
    last: int = 0


def test_an_absent_key_stays_absent_and_a_set_one_is_written_even_when_null():
    """A field a later step adds: missing on read (``ABSENT``, false), left out on write, in field order once set."""
    rec = from_dict(Staged, {"name": "a", "last": 1})
    assert rec.later is ABSENT and not rec.later and repr(rec.later) == "ABSENT"
    assert list(to_dict(rec)) == ["name", "last"]
    assert to_dict(from_dict(Staged, {"name": "a", "later": None, "last": 1})) == {
        "name": "a",
        "later": None,
        "last": 1,
    }
    rec.later = "set"
    assert list(to_dict(rec)) == ["name", "later", "last"]
    with pytest.raises(RecordError, match=r"Staged.later: .* fits none"):
        from_dict(Staged, {"name": "a", "later": 3})


def test_a_non_dict_and_a_non_dataclass_are_refused():
    with pytest.raises(RecordError, match="Outer: expected an object"):
        from_dict(Outer, [1])
    with pytest.raises(TypeError, match="dataclass instance"):
        to_dict({"status": "ok"})
