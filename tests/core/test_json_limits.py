"""What ``to_json`` refuses beyond what the JSON encoder does, and how it says so.

The encoder silently turns ``{1: "a"}`` into ``{"1": "a"}``, passes lone
surrogates that the storage then cannot write, and raises RecursionError or
ValueError for deep nesting and huge integers. Each must be an ``InvalidItem``
that names the problem and where it is.
"""

from __future__ import annotations

import enum
import json
import sys
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pytest

from workhive.errors import InvalidArgument, InvalidItem
from workhive.validation import MAX_DEPTH, check_dedup_key, check_text, printable_text, to_json


def nested(levels: int, leaf: Any = 0) -> Any:
    """``levels`` lists and objects, alternating, around ``leaf`` (built without recursion)."""
    value = leaf
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.fixture
def no_int_digit_limit() -> Iterator[None]:
    """A process that lifted Python's 4300-digit limit (the encoder then writes any integer)."""
    if not hasattr(sys, "set_int_max_str_digits"):
        yield
        return
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ({1: "a"}, ["the key 1 (int) at the top level", 'store it as "1"']),
        ({"a": [{True: 1}]}, ["the key True (bool) at ['a'][0]", '"true"']),
        ({None: 1}, ["the key None (NoneType)", '"null"']),
        ({1.5: 1}, ["the key 1.5 (float)", '"1.5"']),
        ({Colour.RED: 1}, ["(Colour)"]),
        ({(1, 2): 1}, ["the key (1, 2) (tuple)", "JSON has no form for it"]),
        (OrderedDict([("ok", 1), (2, "b")]), ["the key 2 (int)"]),
    ],
)
def test_keys_that_are_not_strings_are_refused(value: Any, fragments: list[str]) -> None:
    with pytest.raises(InvalidItem, match="JSON-serialisable") as err:
        to_json(value)
    for fragment in fragments:
        assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": "\ud800"}, "the string at ['a']"),
        ("lone \udfff", "the string at the top level"),
        (["ok", {"b": ["x\udc80y"]}], "the string at [1]['b'][0]"),
        ({"k\ud800": 1}, "the key 'k\\ud800' at the top level"),
        (["\ud83d\ude00"], "the string at [0]"),  # a surrogate pair as two code units is two lone surrogates
    ],
)
def test_lone_surrogates_are_refused_with_where(value: Any, where: str) -> None:
    with pytest.raises(InvalidItem, match="lone surrogate") as err:
        to_json(value)
    message = str(err.value)
    assert where in message
    message.encode("utf-8")  # the message itself is printable: the surrogate is shown escaped


def test_valid_non_ascii_text_is_kept() -> None:
    assert to_json({"emoji": "\U0001f600", "é": "ü"}) == '{"emoji":"\U0001f600","é":"ü"}'


def test_nesting_up_to_the_limit_is_kept_and_one_more_level_refused() -> None:
    deepest = nested(MAX_DEPTH)
    assert json.loads(to_json(deepest)) == deepest
    with pytest.raises(InvalidItem, match=f"nested more than {MAX_DEPTH} levels"):
        to_json(nested(MAX_DEPTH + 1))


@pytest.mark.parametrize("levels", [1_000, 100_000])
def test_very_deep_nesting_is_an_invalid_item_not_a_recursion_error(levels: int) -> None:
    with pytest.raises(InvalidItem, match=f"nested more than {MAX_DEPTH} levels"):
        to_json(nested(levels))


def test_a_value_that_contains_itself_is_named_as_a_cycle() -> None:
    loop: dict[str, Any] = {"x": [1]}
    loop["x"].append(loop)
    with pytest.raises(InvalidItem, match=r"contains itself at \['x'\]\[1\]"):
        to_json(loop)


def test_wide_values_are_not_mistaken_for_deep_ones() -> None:
    wide = {"rows": [{"id": i, "tags": ["a", "[", "{"]} for i in range(2 * MAX_DEPTH)]}
    assert json.loads(to_json(wide)) == wide


@pytest.mark.parametrize("value", [10**4300, {"n": [1, -(10**5000)]}], ids=["top", "nested-negative"])
def test_integers_over_4300_digits_are_refused(value: Any) -> None:
    with pytest.raises(InvalidItem, match="more than 4300 digits"):
        to_json(value)


@pytest.mark.usefixtures("no_int_digit_limit")
def test_integers_over_4300_digits_are_refused_even_where_python_allows_them() -> None:
    with pytest.raises(InvalidItem, match=r"the integer at \['big'\] has more than 4300 digits"):
        to_json({"big": 10**4300})
    assert to_json({"s": "9" * 5000, "n": 10**4299}).startswith('{"s":"999')


def test_an_integer_of_4300_digits_is_kept() -> None:
    assert len(to_json(10**4300 - 1)) == 4300


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"a": {1, 2}}, "the value at ['a'] is a set"),
        ([b"x"], "the value at [0] is a bytes"),
        ({"f": float("nan")}, "nan at ['f'] is not a JSON number"),
        ([1, float("-inf")], "-inf at [1] is not a JSON number"),
    ],
)
def test_values_json_has_no_form_for_say_where_they_are(value: Any, fragment: str) -> None:
    with pytest.raises(InvalidItem) as err:
        to_json(value)
    assert fragment in str(err.value)


def test_the_label_names_what_was_checked() -> None:
    with pytest.raises(InvalidItem, match=r"^result must be"):
        to_json({1: 2}, "result")


def test_check_text_and_dedup_keys() -> None:
    assert check_text("error", "fine é") == "fine é"
    with pytest.raises(InvalidArgument, match="error contains the lone surrogate '\\\\ud800' at character 3"):
        check_text("error", "abc\ud800")
    assert check_dedup_key("doc-1") == "doc-1"
    for bad in ["", "x" * 1001, 5, None, "k\udc80"]:
        with pytest.raises(InvalidArgument, match="dedup_key"):
            check_dedup_key(bad)


def test_printable_text_escapes_lone_surrogates_only() -> None:
    assert printable_text("plain") == "plain"
    assert printable_text("é \U0001f600") == "é \U0001f600"
    assert printable_text("bad \ud800 and \udfff") == "bad \\ud800 and \\udfff"
    printable_text("x\ud800").encode("utf-8")
