"""Run the demo's fake LLM API on its own, to point your own handler at it.

    python examples/fake_llm_api.py --rate 5
    # prints the URL and three keys (the third always answers 401); Ctrl-C stops it

    export WORKHIVE_DEMO_API_URL=http://127.0.0.1:PORT WORKHIVE_DEMO_KEY_1=… WORKHIVE_DEMO_KEY_2=… WORKHIVE_DEMO_KEY_3=…
    workhive work my-pool --handler workhive.demo.handler:summarise --credentials env:WORKHIVE_DEMO_KEY

The server itself is ``workhive.demo.fake_api.FakeLLMApi`` (stdlib
``ThreadingHTTPServer`` on 127.0.0.1, a free port): ``POST /v1/summarize``
with ``Authorization: Bearer KEY`` and ``{"text": …}``; per-key fixed-window
rate limit answering 429 with ``Retry-After``; ``GET /v1/stats`` for counts.
"""

from __future__ import annotations

import argparse
import secrets
import time

from workhive.demo.fake_api import FakeLLMApi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=20, help="calls per key per second before 429s")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    args = parser.parse_args()
    keys = {f"WORKHIVE_DEMO_KEY_{i}": f"sk-demo-{secrets.token_hex(12)}" for i in (1, 2, 3)}
    good = {keys["WORKHIVE_DEMO_KEY_1"]: "WORKHIVE_DEMO_KEY_1", keys["WORKHIVE_DEMO_KEY_2"]: "WORKHIVE_DEMO_KEY_2"}
    revoked = {keys["WORKHIVE_DEMO_KEY_3"]: "WORKHIVE_DEMO_KEY_3"}
    with FakeLLMApi(good, revoked=revoked, rate=args.rate, port=args.port) as api:
        print(f"export WORKHIVE_DEMO_API_URL={api.url}")
        for name, key in keys.items():
            print(f"export {name}={key}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stats:", api.stats_json())


if __name__ == "__main__":
    main()
