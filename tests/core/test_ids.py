"""Item ids and receipts: one shape on every backend, never a number."""

from __future__ import annotations

import json

import pytest

from workhive.errors import InvalidArgument
from workhive.ids import is_item_id, item_id, item_number, parse_receipt, receipt


def test_an_id_round_trips_and_sorts_in_allocation_order() -> None:
    ids = [item_id(n) for n in (1, 9, 10, 255, 2**40, 2**63 - 1)]
    assert all(is_item_id(i) and len(i) == 17 for i in ids)
    assert sorted(ids) == ids
    assert [item_number(i) for i in ids] == [1, 9, 10, 255, 2**40, 2**63 - 1]


@pytest.mark.parametrize(
    "text",
    [
        "7",
        "00000001",
        "i7",
        "I000000000000002a",
        "i000000000000002A",
        "i0000000000000000",
        "i8000000000000000",
        "iffffffffffffffff",
        "",
        "i000000000000002a ",
    ],
)
def test_strings_of_another_shape_are_no_id(text: str) -> None:
    assert item_number(text) is None


def test_an_id_is_never_parsed_as_a_number() -> None:
    value = item_id(5)
    with pytest.raises(ValueError):
        float(value)
    assert json.loads(json.dumps({"id": value})) == {"id": value}


@pytest.mark.parametrize("number", [0, -1, 2**63, 2**64, 1.0, True, "1"])
def test_bad_numbers_are_refused(number: object) -> None:
    with pytest.raises(InvalidArgument):
        item_id(number)  # type: ignore[arg-type]


def test_a_receipt_carries_id_and_token() -> None:
    r = receipt(item_id(42), 3)
    assert r == "i000000000000002a.3"
    assert parse_receipt(r) == ("i000000000000002a", 3)


def test_a_bare_id_is_refused_as_a_receipt_with_a_hint() -> None:
    with pytest.raises(InvalidArgument, match="not a receipt"):
        parse_receipt(item_id(42))


@pytest.mark.parametrize(
    "value", ["i000000000000002a.", "i000000000000002a.x", "7.3", None, 42, "i000000000000002a.-1"]
)
def test_malformed_receipts_are_refused(value: object) -> None:
    with pytest.raises(InvalidArgument, match="receipt"):
        parse_receipt(value)
