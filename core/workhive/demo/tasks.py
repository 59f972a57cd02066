"""The demo's summarisation tasks: short made-up documents, the same every run.

>>> texts = make_texts(3)
>>> len(texts), texts == make_texts(3)
(3, True)
"""

from __future__ import annotations

import random

__all__ = ["make_texts"]

_SUBJECTS = ("The hive", "A worker", "The queue", "Each lease", "The supervisor", "A rate limit", "The fleet")
_VERBS = ("reports", "balances", "retries", "drains", "schedules", "records", "protects")
_OBJECTS = ("every pending item", "the slow API", "a fencing token", "the shared cooldowns", "late completions")
_ENDINGS = ("before dawn", "without losing work", "under load", "after a crash", "in small batches")


def make_texts(count: int, *, seed: int = 6) -> list[str]:
    """``count`` documents of three to six sentences, from a fixed seed."""
    rng = random.Random(seed)
    texts = []
    for number in range(count):
        sentences = [
            f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_ENDINGS)}"
            for _ in range(rng.randint(3, 6))
        ]
        texts.append(f"Document {number + 1}: " + ". ".join(sentences) + ".")
    return texts
