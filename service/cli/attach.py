"""`gpuq shell`'s side of a session's terminal: this terminal, in raw mode, relayed over a
WebSocket (`/v1/jobs/{id}/terminal`) to the session's program.

Keys go as binary messages, this terminal's size as `{"rows": R, "cols": C}` at the start
and on each SIGWINCH; what the program shows comes back as binary messages. From a pipe
instead of a terminal, the input is sent as it is, then Ctrl-D.
"""

import contextlib
import json
import os
import selectors
import signal
import sys
import termios
import threading
import tty
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from gpuq.http import ApiError, Client

EOT = b"\x04"
READ_CHUNK = 65536


def attach(client: Client, job_id: int) -> None:
    """Relays this terminal to session `job_id` until the session or this side ends;
    `ApiError` if gpuq refused to attach."""
    connection = client.terminal(job_id)
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    wake_r, wake_w = os.pipe()
    previous = signal.signal(signal.SIGWINCH, lambda *_: os.write(wake_w, b"w"))
    shown = threading.Thread(target=_show, args=(connection, stdout, wake_w), daemon=True)
    try:
        if saved is not None:
            tty.setraw(stdin)
        _send_size(connection, stdout)
        shown.start()
        _type(connection, stdin, stdout, wake_r)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, previous)
        connection.close()
        shown.join(timeout=5)
        for fd in (wake_r, wake_w):
            os.close(fd)
    _refusal(connection)


def _type(connection: ClientConnection, stdin: int, stdout: int, wake: int) -> None:
    """Sends what is typed (and each new window size) until the session ends."""
    selector = selectors.DefaultSelector()
    selector.register(stdin, selectors.EVENT_READ, "keys")
    selector.register(wake, selectors.EVENT_READ, "wake")
    with contextlib.suppress(ConnectionClosed):
        while True:
            for key, _ in selector.select():
                if key.data == "wake":
                    if b"x" in os.read(wake, 64):  # the session ended
                        return
                    _send_size(connection, stdout)
                    continue
                keys = os.read(stdin, READ_CHUNK)
                if not keys:  # a pipe ran dry: the program reads its end
                    connection.send(EOT)
                    selector.unregister(stdin)
                    continue
                connection.send(keys)


def _show(connection: ClientConnection, stdout: int, wake: int) -> None:
    """Writes what the program shows, until the session ends; then wakes `_type`."""
    with contextlib.suppress(ConnectionClosed, OSError):
        for message in connection:
            data = message if isinstance(message, bytes) else message.encode()
            while data:
                data = data[os.write(stdout, data) :]
    with contextlib.suppress(OSError):
        os.write(wake, b"x")


def _send_size(connection: ClientConnection, stdout: int) -> None:
    try:
        size = os.get_terminal_size(stdout)
    except OSError:
        return  # not a terminal: the program keeps its default
    connection.send(json.dumps({"rows": size.lines, "cols": size.columns}))


def _refusal(connection: ClientConnection) -> None:
    """Raises `ApiError` if gpuq closed the terminal with a refusal (4000 + a status)."""
    close: Any = connection.protocol.close_rcvd
    if close is not None and 4000 <= close.code < 5000:
        raise ApiError(close.reason or f"refused ({close.code - 4000})", close.code - 4000)
