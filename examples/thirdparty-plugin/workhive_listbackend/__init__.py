"""workhive-listbackend: a deliberately simple storage backend, written as a third party would.

``workhive.open("list://")`` once this distribution is installed.
"""

__all__ = ["ListStorage"]


def __getattr__(name: str) -> object:
    if name == "ListStorage":
        from workhive_listbackend.backend import ListStorage

        return ListStorage
    raise AttributeError(name)
