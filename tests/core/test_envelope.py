"""``workhive.envelope``: headers travel with an item's data, and what a handler reads is what was pushed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workhive.envelope import ENVELOPE_PREFIX, data_text, headers, seal, unseal
from workhive.models import ItemState, WorkItem
from workhive.validation import to_json

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["$workhive", "data", "a"]), inner),
    max_leaves=10,
)


def item(payload: str) -> WorkItem:
    return WorkItem("i0000000000000001", "jobs", payload, ItemState.PENDING, 0, 0, 5, 0, 0.0, 0.0)


@given(json_values, st.booleans())
def test_what_is_read_is_what_was_pushed_with_or_without_headers(value: object, carry: bool) -> None:
    payload = to_json(value)
    sealed = seal(payload, {"traceparent": TRACEPARENT} if carry else None)
    assert unseal(sealed) == value
    assert item(sealed).data == value
    assert json.loads(data_text(sealed)) == value
    assert headers(sealed) == ({"traceparent": TRACEPARENT} if carry else {})


def test_a_payload_without_headers_is_stored_unchanged() -> None:
    assert seal('{"n":1}', None) == seal('{"n":1}', {}) == '{"n":1}'


def test_data_that_looks_like_an_envelope_is_sealed_so_it_reads_back_as_pushed() -> None:
    lookalike = to_json({"$workhive": {"traceparent": TRACEPARENT}, "data": "not mine"})
    assert lookalike.startswith(ENVELOPE_PREFIX)
    sealed = seal(lookalike, None)
    assert sealed != lookalike
    assert unseal(sealed) == {"$workhive": {"traceparent": TRACEPARENT}, "data": "not mine"}
    assert headers(sealed) == {}, "data cannot forge a trace context"


def test_a_hand_written_payload_with_the_prefix_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not one"):
        unseal('{"$workhive":1}')
