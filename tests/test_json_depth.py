"""core/json_depth: JSON nested deeper than MAX_JSON_DEPTH is an error naming what it is, the keys to the first
value too deep, its depth and the limit, found without recursion (brackets in strings and escapes do not
count); whatever nests within the limit parses as json.loads parses it, a real multi-MB Ascend file too."""
from __future__ import annotations

import json
from decimal import Decimal

import pytest

from perfsight.core.errors import InputError
from perfsight.core.json_depth import MAX_JSON_DEPTH, JsonTooDeep, check_depth, loads_bounded
from tests.conftest import SHARED_DATA

TRACE_VIEW = SHARED_DATA / "ascend/torch_npu/text/level2/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_the_limit_is_allowed_and_one_more_level_is_an_error_naming_it():
    assert loads_bounded(nested(MAX_JSON_DEPTH), "x.json") == json.loads(nested(MAX_JSON_DEPTH))
    with pytest.raises(JsonTooDeep) as deeper:
        check_depth(nested(MAX_JSON_DEPTH + 1).encode(), "x.json")
    assert str(deeper.value) == (f"x.json: JSON nested {MAX_JSON_DEPTH + 1} levels deep (arrays and objects within "
                                 f"each other) at `$[...][...][...][...]...`; perfsight reads at most {MAX_JSON_DEPTH}")
    assert isinstance(deeper.value, InputError) and isinstance(deeper.value, ValueError)


def test_a_thousand_levels_are_refused_naming_the_keys_not_a_recursion_error():
    text = json.dumps({"kind": "op", "entries": {"1": {"key": "1"}, "2 3": {'sig"n': "DEEP"}}})
    with pytest.raises(JsonTooDeep) as refused:
        loads_bounded(text.replace('"DEEP"', '{"a": ' * 1000 + "1" + "}" * 1000), "opat.json")
    assert refused.value.reason == ("JSON nested 1003 levels deep (arrays and objects within each other) at "
                                    '`$.entries["2 3"]["sig\\"n"].a...`; perfsight reads at most 64')


def test_brackets_in_strings_and_escapes_do_not_count():
    inside = '["' + "[" * 100 + '", "\\"[[[[", "\\\\", ' + nested(MAX_JSON_DEPTH - 1) + "]"
    assert loads_bounded(inside, "x") == json.loads(inside)
    with pytest.raises(JsonTooDeep, match="nested 66 levels deep"):
        check_depth('["\\\\", "\\"", ' + nested(MAX_JSON_DEPTH + 1) + "]", "x")


def test_parse_float_and_bytes_parse_as_json_loads():
    assert loads_bounded(b'{"t": 1736408883724708.453}', "x", parse_float=Decimal) == {
        "t": Decimal("1736408883724708.453")}
    with pytest.raises(ValueError):
        loads_bounded(b'{"t": \xff}', "x")


def test_a_real_multi_megabyte_file_parses_as_json_loads_parses_it():
    """The check's cost is a benchmark's matter, not a test's (the machine's speed would decide it)."""
    data = TRACE_VIEW.read_bytes()
    assert len(data) > 2_000_000 and loads_bounded(data, TRACE_VIEW.name) == json.loads(data)
