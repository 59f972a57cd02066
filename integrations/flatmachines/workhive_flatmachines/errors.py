"""Errors that are workhive's and, at once, the built-in types flatmachines code catches.

flatmachines' own pools raise ``KeyError`` for an id they cannot act on (a job
completed already, or taken away) and ``TypeError`` (from ``json.dumps``) for
data JSON cannot hold. Code written against them says ``except KeyError`` and
``except TypeError``; these classes keep that code working while staying
``workhive.LeaseLost`` / ``workhive.InvalidItem`` for code written against
workhive.

>>> issubclass(ClaimLost, KeyError) and issubclass(ClaimLost, LeaseLost)
True
>>> issubclass(NotJSON, TypeError) and issubclass(NotJSON, InvalidItem)
True
"""

from __future__ import annotations

from workhive.errors import InvalidItem, LeaseLost, WorkhiveError

__all__ = ["ClaimLost", "ExecutionTakenOver", "NotJSON"]


class ClaimLost(LeaseLost, KeyError):
    """This claim can no longer be completed or failed (done already, or claimed again by another worker)."""

    # KeyError's __str__ would print the message as a quoted repr; workhive's plain text is the message.
    __str__ = WorkhiveError.__str__


class NotJSON(InvalidItem, TypeError):
    """Data, a result or metadata is not JSON-serialisable; nothing was stored."""


class ExecutionTakenOver(LeaseLost):
    """Another process holds this machine execution now; this one must stop writing its checkpoints."""
