"""Contention simulation: N clients racing to update one resource, per backoff strategy.

The model (after the AWS Architecture Blog's study "Exponential Backoff And
Jitter"): every client must make one successful optimistic-concurrency write.
A call takes one time slot (read, then conditional write). Of the calls that
land in the same slot, the first to arrive commits; the others find the
version changed, fail, and back off by their strategy's delay before trying
again. Time is simulated, so the run is fast and deterministic (seeded).

Printed per strategy: total calls (work the server had to do) and the time
until the last client was done, both averaged over several seeds, with the
ratio against plain exponential backoff without jitter (``exponential``, the
built-in registered as the baseline) measured in the same run.

    python bench/backoff.py [--clients 25,50,100] [--seeds 20]
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
import time

from workhive.backoff import Constant, Decorrelated, EqualJitter, Exponential, FullJitter, NoBackoff

BASE = 1.0  # one slot: the duration of a call
CAP = 1000.0

STRATEGIES = {
    "exponential": lambda rng: Exponential(base=BASE, cap=CAP, rng=rng),
    "full-jitter": lambda rng: FullJitter(base=BASE, cap=CAP, rng=rng),
    "equal-jitter": lambda rng: EqualJitter(base=BASE, cap=CAP, rng=rng),
    "decorrelated": lambda rng: Decorrelated(base=BASE, cap=CAP, rng=rng),
    "constant": lambda rng: Constant(base=BASE, cap=CAP, rng=rng),
    "none": lambda rng: NoBackoff(base=BASE, cap=CAP, rng=rng),
}


def simulate(name: str, clients: int, seed: int) -> tuple[int, float]:
    """(total calls, completion time in slots) for ``clients`` racing under strategy ``name``."""
    rng = random.Random(seed)
    strategy = STRATEGIES[name](rng)
    walk = isinstance(strategy, Decorrelated)  # decorrelated jitter walks from the previous delay
    # (arrival time, tie-break, client, failed attempts so far, previous delay)
    queue = [(0.0, rng.random(), client, 0, BASE) for client in range(clients)]
    heapq.heapify(queue)
    calls, finished_at = 0, 0.0
    while queue:
        slot = int(queue[0][0])
        contenders = []
        while queue and int(queue[0][0]) == slot:
            contenders.append(heapq.heappop(queue))
        calls += len(contenders)
        winner, *losers = contenders  # heap order: earliest arrival (random among exact ties) commits
        finished_at = max(finished_at, winner[0] + 1.0)
        for at, _tie, client, attempts, previous in losers:
            attempts += 1
            if walk:
                delay = strategy.delay(attempts, previous=previous)  # type: ignore[call-arg]
            else:
                delay = strategy.delay(attempts)
            heapq.heappush(queue, (at + 1.0 + delay, rng.random(), client, attempts, delay))
    return calls, finished_at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="25,50,100", help="comma-separated client counts")
    parser.add_argument("--seeds", type=int, default=20, help="runs averaged per cell")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",")]
    started = time.perf_counter()
    print(f"backoff contention simulation: base={BASE} slot, cap={CAP} slots, {args.seeds} seeds per cell")
    print("baseline: exponential backoff without jitter (same run); time in slots (one call = one slot)")
    print("(constant/none finish fast only because this server serialises for free: they spend the most calls)")
    failures = []
    for clients in counts:
        print(f"\n{clients} clients")
        print(f"  {'strategy':<13} {'calls':>9} {'calls/base':>10} {'time':>10} {'time/base':>9}")
        results = {}
        for name in STRATEGIES:
            runs = [simulate(name, clients, seed) for seed in range(args.seeds)]
            results[name] = (statistics.mean(r[0] for r in runs), statistics.mean(r[1] for r in runs))
        base_calls, base_time = results["exponential"]
        for name, (calls, finish) in results.items():
            print(f"  {name:<13} {calls:>9.0f} {calls / base_calls:>10.3f} {finish:>10.0f} {finish / base_time:>9.3f}")
        if not results["full-jitter"][0] < base_calls:
            failures.append(clients)
    print(f"\n(simulated in {time.perf_counter() - started:.1f}s of real time)")
    if failures:
        print(f"UNEXPECTED: full-jitter needed no fewer calls than exponential for {failures} clients")
        return 1
    print("full-jitter needs fewer calls than exponential without jitter at every client count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
