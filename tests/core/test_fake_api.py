"""The demo's fake API as the rate-limit bench uses it: a limit that moves, and calls in flight per key.

No server traffic and no timing: the admission decision is called directly, with a window
so long that the bucket's refill during the test is far below one call.
"""

from __future__ import annotations

from workhive.demo.fake_api import FakeLLMApi


def test_a_lowered_limit_caps_what_the_bucket_holds_and_a_raised_one_refills_at_the_new_rate() -> None:
    with FakeLLMApi({"sk-a": "key-1"}, rate=4, window=3600.0) as api:
        assert api._admit("sk-a")[0] == 200  # 3 calls left
        api.set_rate(2)  # the provider halves the limit: no more than 2 calls left
        assert [api._admit("sk-a")[0] for _ in range(3)] == [200, 200, 429]
        api.set_rate(8)
        assert api._admit("sk-a")[0] == 429, "a raised limit refills from now on; it grants nothing at once"
        assert api.rate == 8 and api.stats_json()["key-1"]["rate_limited"] == 2


def test_calls_in_flight_are_counted_per_key_with_the_most_seen() -> None:
    with FakeLLMApi({"sk-a": "key-1", "sk-b": "key-2"}, rate=10, window=3600.0) as api:
        for _ in range(3):
            assert api._admit("sk-a")[0] == 200
        api._answered("sk-a")
        assert api._admit("sk-b")[0] == 200
        stats = api.stats_json()
        assert (stats["key-1"]["in_flight"], stats["key-1"]["max_in_flight"]) == (2, 3)
        assert (stats["key-2"]["in_flight"], stats["key-2"]["max_in_flight"]) == (1, 1)


def test_the_first_request_s_moment_is_recorded_once_whatever_its_answer() -> None:
    """bench/ratelimit counts its window from it: a request refused (an unknown key) is the API's first all the same."""
    with FakeLLMApi({"sk-a": "key-1"}, rate=1, window=3600.0) as api:
        assert api.first_request_at is None
        assert api._admit("sk-unknown")[0] == 401
        first = api.first_request_at
        assert first is not None
        assert [api._admit("sk-a")[0] for _ in range(2)] == [200, 429]
        assert api.first_request_at == first
