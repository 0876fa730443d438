"""A session's terminal: the user's WebSocket (`gpuq shell`) relayed to the session's
runner, which holds the terminal as the job's owner (`worker.session`).

gpuq connects to the runner's `terminal.sock` in the attempt's folder, a folder the owner
can write: so it never follows a link there (`job_files.connect`: a link to another
member's session is refused before anything connects to it), and it believes the socket
only if the kernel says the process listening on it is the runner gpuq recorded, as the
account the folder was given to (`SO_PEERCRED`).
"""

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import MutableMapping
from typing import Any, Protocol

from gpuq.contract import job_files, terminal
from gpuq.contract.processes import peer_credentials
from gpuq.contract.rundir import RunDir
from gpuq.contract.states import JobStatus
from service.errors import Conflict, Forbidden, Unavailable
from service.store.tables import Job
from service.team.users import Caller

READ_CHUNK = 65536


class Peer(Protocol):
    """The user's side: a WebSocket as Starlette gives it."""

    async def receive(self) -> MutableMapping[str, Any]: ...
    async def send_bytes(self, data: bytes) -> None: ...


def check_attach(job: Job, caller: Caller) -> int:
    """The runner pid of `job`, a running session `caller` owns; raises otherwise."""
    if job.owner != caller.name:
        raise Forbidden(f"job {job.id} is {job.owner}'s session: only its owner attaches to it")
    if job.spec.get("kind") != "session":
        raise Conflict(f"job {job.id} is not a session (`gpuq shell` starts one)")
    if job.status != JobStatus.running or not job.runner_pid:
        raise Conflict(f"job {job.id} is {job.status}: only a running session has a terminal")
    return job.runner_pid


def connect_to_runner(run: RunDir, runner_pid: int) -> socket.socket:
    """A connection to the runner's terminal; `Unavailable` if there is none, or if who
    listens is not the runner (the pid gpuq recorded, as the account the attempt's folder
    was given to)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        job_files.connect(run.path, run.terminal.name, sock)  # never through a link
        pid, uid, _ = peer_credentials(sock)
        owner = os.stat(run.path).st_uid
    except OSError as exc:
        sock.close()
        raise Unavailable(
            "the session's terminal cannot be reached: it is attached elsewhere, has ended, "
            "or runs on another gpuq host"
        ) from exc
    if (pid, uid) != (runner_pid, owner):
        sock.close()
        raise Unavailable("the session's terminal is not its runner's; not attaching")
    return sock


async def relay(peer: Peer, sock: socket.socket) -> None:
    """Relays until either side ends: the user's keys and window size to the runner, the
    terminal's output to the user."""
    sock.setblocking(False)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    tasks = [
        asyncio.create_task(_upstream(peer, writer)),
        asyncio.create_task(_downstream(reader, peer)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _upstream(peer: Peer, writer: asyncio.StreamWriter) -> None:
    """Binary messages are keys; text messages `{"rows": R, "cols": C}` the window."""
    while True:
        message = await peer.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes"):
            writer.write(terminal.frame(terminal.DATA, message["bytes"]))
        elif message.get("text"):
            window = _window(message["text"])
            if window is not None:
                writer.write(terminal.size_frame(*window))
        await writer.drain()


def _window(text: str) -> tuple[int, int] | None:
    """Rows and columns from a window message; None for anything else."""
    try:
        data = json.loads(text)
        rows, cols = int(data["rows"]), int(data["cols"])
    except (ValueError, TypeError, KeyError, OverflowError):  # Overflow: `Infinity`
        return None
    return rows, cols


async def _downstream(reader: asyncio.StreamReader, peer: Peer) -> None:
    frames = terminal.FrameReader()
    while data := await reader.read(READ_CHUNK):
        for kind, payload in frames.feed(data):
            if kind == terminal.DATA:
                await peer.send_bytes(payload)
