"""A session's terminal between gpuq's service and the session's runner.

The runner (as the job's owner) holds the terminal and listens on `terminal.sock` in the
attempt's folder; the service connects there for the user's `gpuq shell` and relays. What
goes over it are frames: a byte of kind, four of length (big-endian), the payload. `DATA`
is what the terminal shows or what the user typed; `SIZE` (service to runner) is the
user's window, rows and columns as two 16-bit numbers. The runner takes one connection;
when it ends, so does the session.
"""

import struct

DATA = b"d"
SIZE = b"s"
KINDS = (DATA, SIZE)
HEADER = struct.Struct(">cI")
WINDOW = struct.Struct(">HH")
#: the largest payload either side sends or accepts
MAX_PAYLOAD = 1 << 20


class BadFrame(ValueError):
    """The other side sent something that is not a frame."""


def frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def size_frame(rows: int, cols: int) -> bytes:
    """A `SIZE` frame; sizes out of range are clamped, a terminal cannot use them anyway."""
    return frame(SIZE, WINDOW.pack(max(1, min(rows, 9999)), max(1, min(cols, 9999))))


def window(payload: bytes) -> tuple[int, int]:
    """Rows and columns of a `SIZE` frame's payload."""
    if len(payload) != WINDOW.size:
        raise BadFrame(f"a window size is {WINDOW.size} bytes, not {len(payload)}")
    rows, cols = WINDOW.unpack(payload)
    return rows, cols


class FrameReader:
    """Cuts a byte stream into frames."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """The frames completed by `data`; `BadFrame` for an unknown kind or a length over
        `MAX_PAYLOAD`."""
        self._pending += data
        frames = []
        while len(self._pending) >= HEADER.size:
            kind, length = HEADER.unpack_from(self._pending)
            if kind not in KINDS or length > MAX_PAYLOAD:
                raise BadFrame(f"not a terminal frame (kind {kind!r}, {length} bytes)")
            end = HEADER.size + length
            if len(self._pending) < end:
                break
            frames.append((kind, self._pending[HEADER.size : end]))
            self._pending = self._pending[end:]
        return frames
