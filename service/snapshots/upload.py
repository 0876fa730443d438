"""A tar on its way into the store: written to a temporary file beside the store while it
is hashed, never held whole in memory, and cut off as soon as it passes the size limit."""

import asyncio
import hashlib
import os
import tempfile
from collections.abc import AsyncIterable
from pathlib import Path

from service.snapshots.refusals import TooLarge

#: received bytes are written (and hashed) off the event loop this many at a time
BLOCK_BYTES = 1024 * 1024
#: an upload's temporary file; one a crash left behind is removed later (`retention`)
TEMP_PREFIX = ".upload-"


class Upload:
    """The temporary file of one upload (0600), its size and its sha256 so far."""

    def __init__(self, folder: Path) -> None:
        fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".part", dir=folder)
        self.path = Path(name)
        self.size = 0
        self._file = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self._placed = False

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    async def fill(self, body: AsyncIterable[bytes], max_bytes: int, too_large: TooLarge) -> None:
        """Writes `body` to the file, raising `too_large` (and reading no further) as soon
        as it passes `max_bytes`; closes the file, its bytes on disk."""
        block = bytearray()
        async for chunk in body:
            if self.size + len(block) + len(chunk) > max_bytes:
                raise too_large
            block += chunk
            if len(block) >= BLOCK_BYTES:
                await asyncio.to_thread(self._write, block)
                block = bytearray()
        await asyncio.to_thread(self._write_last, block)

    def place(self, path: Path) -> None:
        """Moves the file to `path`, for good (the rename is atomic and made durable)."""
        os.replace(self.path, path)
        self._placed = True
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def discard(self) -> None:
        """Removes the file unless it was placed; harmless twice."""
        self._file.close()
        if not self._placed:
            self.path.unlink(missing_ok=True)

    def _write(self, block: bytearray) -> None:
        self._file.write(block)
        self._hash.update(block)
        self.size += len(block)

    def _write_last(self, block: bytearray) -> None:
        self._write(block)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
