"""Reading a job's `output.log`: whole, from a byte offset, the last N lines, or followed."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from gpuq.contract.job_files import open_file

MAX_LOG_BYTES = 16 * 1024 * 1024
FOLLOW_POLL_S = 0.25
CHUNK_BYTES = 64 * 1024


def read_log(path: Path, *, offset: int = 0, tail: int | None = None) -> tuple[bytes, int]:
    """The log from `offset` (at most 16 MiB), or its last `tail` lines; and the byte
    offset where the answer ends, to ask for the next page from."""
    try:
        with open_file(path.parent, path.name) as f:
            size = f.seek(0, 2)
            if tail is not None:
                start = max(0, size - MAX_LOG_BYTES)
                f.seek(start)
                lines = f.read().splitlines(keepends=True)
                return b"".join(lines[-tail:]), size
            start = f.seek(min(offset, size))
            body = f.read(MAX_LOG_BYTES)
            return body, start + len(body)
    except (FileNotFoundError, PermissionError):
        return b"", 0


async def follow_log(
    path: Callable[[], Path | None], ended: Callable[[], bool], offset: int = 0
) -> AsyncIterator[bytes]:
    """Streams the log as it grows; stops once `ended()` and everything was sent.

    `path` is asked again each time, since a queued job has no log until it starts.
    """
    while True:
        # Read the state before draining, so nothing written just before the end is missed.
        finished = await asyncio.to_thread(ended)
        current = await asyncio.to_thread(path)
        if current is not None:
            try:
                with open_file(current.parent, current.name) as f:
                    f.seek(offset)
                    while chunk := f.read(CHUNK_BYTES):
                        offset += len(chunk)
                        yield chunk
            except (FileNotFoundError, PermissionError):
                pass
        if finished:
            return
        await asyncio.sleep(FOLLOW_POLL_S)
