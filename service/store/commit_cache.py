"""Values kept until the database changes (`Database.cached`): each is kept with the
database's version when it was loaded, and with a revision for one kept across commits."""

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CommitCache:
    """Loaded values by key, each with the version and revision it was loaded at."""

    def __init__(self) -> None:
        #: key → (the database's version, the revision, the value)
        self._values: dict[str, tuple[object, int | None, Any]] = {}
        self._lock = threading.Lock()

    def get(
        self,
        key: str,
        load: Callable[[], T],
        version: object | None,
        revision: Callable[[], int | None] | None = None,
    ) -> T:
        """`load()`'s value, kept while `version` stays what it was (None: loaded every
        time); with `revision`, kept across versions too while `revision()` says the same."""
        if version is None:
            return load()
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and hit[0] == version:
            return hit[2]
        # Read before `load`, so a change in between makes the next call load again.
        rev = None if revision is None else revision()
        value = hit[2] if hit is not None and rev is not None and hit[1] == rev else load()
        with self._lock:
            self._values[key] = (version, rev, value)
        return value
