"""The command line's JSON text: what ``--json`` prints is the same document whichever encoder
writes it (orjson where it can, Python's json where orjson refuses a value)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pglogq.cli import jsontext
from pglogq.cli.jsontext import RawJson

# what a listing holds: text (any code point but lone surrogates), integers of any size, floats,
# booleans, nulls, nested lists and objects
_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(st.characters(blacklist_categories=("Cs",))))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=30)


def _python(value: Any, indent: int | None) -> str:
    """What Python's json writes for ``value`` (the layout ``dumps`` has always had)."""
    return json.dumps(value, indent=indent, separators=None if indent else (",", ":"))


@settings(max_examples=300, deadline=None)
@given(_values)
def test_dumps_writes_what_python_json_writes(value: Any) -> None:
    for indent in (None, 2):
        got, want = jsontext.dumps(value, indent=indent), _python(value, indent)
        assert got.isascii()
        # the same numbers to the last digit, however a float is spelled (orjson writes 0.00003
        # or 1e-5 where Python writes 3e-05 or 1e-05)
        assert json.loads(got, parse_float=Decimal) == json.loads(want, parse_float=Decimal)
        if not any(isinstance(v, float) for v in _leaves(value)):
            assert got == want


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


def test_raw_json_decimals_and_refused_values_are_written_as_before() -> None:
    value = {
        "payload": RawJson('{"n":123456789012345678901234567890,"s":"é"}'),
        "exact": Decimal("1.10"),
        "big": 2**70,  # beyond 64 bits: orjson refuses it, Python's json writes it
        "not_finite": float("nan"),
        "text": "é\u2028😀",
        "empty": [{}, []],
    }
    for indent in (None, 2):
        got = jsontext.dumps(value, indent=indent)
        assert got.isascii()
        doc = json.loads(got, parse_float=Decimal)
        assert doc["payload"] == {"n": 123456789012345678901234567890, "s": "é"}
        assert str(doc["exact"]) == "1.10"
        assert doc["big"] == 2**70
        assert doc["not_finite"] is None
        assert doc["text"] == "é\u2028😀"
        assert doc["empty"] == [{}, []]
    assert '"exact": 1.10' in jsontext.dumps(value, indent=2)
    nested = '{\n  "a": [\n    1,\n    {\n      "b": null\n    }\n  ]\n}'
    assert jsontext.dumps({"a": [1, {"b": None}]}, indent=2) == nested
