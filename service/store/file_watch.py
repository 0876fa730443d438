"""Calls a function whenever one file beside the database is written or touched: Linux's
inotify (through `inotify_simple`), in a thread of its own."""

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from inotify_simple import INotify, flags

log = logging.getLogger(__name__)

#: how often the thread looks whether it should stop
STOP_CHECK_MS = 250
#: a change to what is in the file, or to its times (a touch)
CHANGED = flags.MODIFY | flags.ATTRIB


class FileWatch:
    def __init__(self, path: Path, changed: Callable[[], None], *, make: bool = False) -> None:
        """`changed()` runs in the watch's thread after each batch of changes to `path`;
        an exception it raises is logged. With `make`, the file is made (0600) if missing
        and watched itself: no other file's changes wake the thread. Without, its folder
        is watched, for a file that may come and go (SQLite's write-ahead log)."""
        self._path = path
        self._changed = changed
        self._make = make
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Starts watching; False (and one log line) where the file cannot be watched."""
        try:
            inotify = INotify()
            self._add(inotify)
        except OSError as exc:
            log.info("cannot watch %s (%s); polling instead", self._path, exc)
            return False
        name = f"gpuq-watch-{self._path.name}"
        self._thread = threading.Thread(target=self._watch, args=(inotify,), name=name)
        self._thread.daemon = True
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * STOP_CHECK_MS / 1000)

    def _add(self, inotify: INotify) -> None:
        if not self._make:
            inotify.add_watch(self._path.parent, flags.CREATE | CHANGED)
            return
        os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        inotify.add_watch(self._path, CHANGED)

    def _watch(self, inotify: INotify) -> None:
        with inotify:
            while not self._stopping.is_set():
                events = inotify.read(timeout=STOP_CHECK_MS)
                names = {event.name for event in events}
                if not events or not (self._make or self._path.name in names):
                    continue
                try:
                    if any(event.mask & flags.IGNORED for event in events):
                        self._add(inotify)  # removed, or moved away: watch a new one
                    self._changed()
                except Exception:  # the thread must live on; a poll still finds it
                    log.exception("could not act on a change to %s", self._path)
