"""A session's runner: the job's program (a shell, a notebook) on a terminal of its own,
relayed to its owner's `gpuq shell` by gpuq's service (`gpuq.contract.terminal`).

The runner leads the job's session. It opens a pseudo-terminal, makes it the session's
controlling terminal and starts the program as the terminal's foreground process group, so
whatever the user starts from it (each pipeline in a group of its own) stays in the job's
session, where gpuq attributes GPU memory and sends signals. It is also a subreaper: what
the user double-forks out of the session stays its descendant.

It listens on `terminal.sock` in the attempt's folder for one connection, gpuq's relay
(the kernel says it is root's or gpuq's account's; any other is closed unheard),
and ends the session when the program exits (its exit code, as a batch job's), when that
connection closes or none came within `ATTACH_WITHIN_S` (the user's terminal went away:
`terminal_closed` in `exit.json`), or when gpuq stops the job (SIGTERM: cancel, time
limit, idle rule). Ending is a hang-up: SIGHUP, SIGTERM and SIGCONT to every process of
the session and every descendant, SIGKILL to those left after `HANGUP_GRACE_S`. What the
terminal shows is kept in `output.log` too.
"""

import contextlib
import fcntl
import os
import selectors
import signal
import socket
import struct
import subprocess
import termios
import time
from typing import Any

from gpuq.contract import terminal
from gpuq.contract.events import Event, EventWriter
from gpuq.contract.processes import peer_credentials, prctl, session_and_descendants
from gpuq.contract.rundir import RunDir
from worker.runner_records import end_with, record_start

#: how long a started session waits for its terminal to attach
ATTACH_WITHIN_S = 60.0
#: after an early exit, how long the program's last words wait for the terminal to attach
LAST_WORDS_S = 5.0
#: from the hang-up to SIGKILL for what is left of the session
HANGUP_GRACE_S = 2.0
HEARTBEAT_S = 2.0
READ_CHUNK = 65536
PR_SET_CHILD_SUBREAPER = 36
WINSIZE = struct.Struct("HHHH")  #: the kernel's `struct winsize`: rows, columns, pixels


def become_subreaper() -> None:
    """Orphans among this process's descendants become its children, not init's."""
    prctl(PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")


def _to_foreground() -> None:
    """In the program's process, before exec: lead a process group of its own (done by
    `process_group=0`) and make it the terminal's foreground group."""
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group asking: allowed
    os.tcsetpgrp(0, os.getpid())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)


class Session:
    def __init__(self, run: RunDir, plan: dict[str, Any]) -> None:
        self.run = run
        become_subreaper()
        self.master, slave = os.openpty()
        # The runner leads the job's session and has no terminal yet: this one becomes it.
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # By its name in the runner's folder: the whole path may pass a socket's 108 bytes.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(run.terminal.name)
        self.listener.bind(run.terminal.name)
        os.chmod(run.terminal.name, 0o600)
        self.listener.listen(1)
        #: gpuq's account: the one that owns the job's folder, above the attempt's
        self.gpuq_uid = os.stat(run.path.parent).st_uid
        self.child = subprocess.Popen(
            plan["argv"],
            env={**os.environ, **plan["env"]},
            cwd=plan["cwd"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            process_group=0,
            preexec_fn=_to_foreground,  # the runner has no threads: safe
        )
        os.close(slave)
        self.client: socket.socket | None = None
        self.frames = terminal.FrameReader()
        self.log = open(run.log, "ab", buffering=0)  # noqa: SIM115 - open for the session
        self.exit_status: int | None = None
        self.stopped = False

    def serve(self) -> bool:
        """Relays until the session ends, then hangs it up; whether its terminal went away
        (closed, or never attached) while the program still ran."""
        selector = selectors.DefaultSelector()
        wakeup_r, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._stop)
        selector.register(self.listener, selectors.EVENT_READ, "attach")
        selector.register(os.pidfd_open(self.child.pid), selectors.EVENT_READ, "exit")
        selector.register(wakeup_r, selectors.EVENT_READ, "signal")
        attach_by = time.monotonic() + ATTACH_WITHIN_S
        beat_at = 0.0
        terminal_closed = False
        while not self.stopped:
            now = time.monotonic()
            if now >= beat_at:
                self.run.heartbeat.touch()
                beat_at = now + HEARTBEAT_S
            if self.client is None and now >= attach_by:
                terminal_closed = self.exit_status is None
                break
            wait_s = HEARTBEAT_S if self.client else min(HEARTBEAT_S, max(0.0, attach_by - now))
            for key, _ in selector.select(wait_s):
                if key.data == "attach":
                    self._attach(selector)
                elif key.data == "exit":
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    self.exit_status = self.child.wait()
                    attach_by = min(attach_by, time.monotonic() + LAST_WORDS_S)
                elif key.data == "signal":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wakeup_r, 64)
                elif key.data == "output" and not self._output():
                    selector.unregister(self.master)  # every end of the terminal closed
                elif key.data == "input" and not self._input():
                    terminal_closed = self.exit_status is None
                    self.stopped = True
            self._reap_orphans()
            if self.exit_status is not None and self.client is not None:
                self._drain()
                break
        return self._end(terminal_closed)

    def _stop(self, *_: object) -> None:
        self.stopped = True

    def _attach(self, selector: selectors.BaseSelector) -> None:
        """Takes the first connection from gpuq's relay of the user's terminal; any other
        connection is closed and the session goes on waiting."""
        connection, _ = self.listener.accept()
        _, uid, _ = peer_credentials(connection)
        if uid not in (0, self.gpuq_uid):
            connection.close()
            return
        selector.unregister(self.listener)
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.run.terminal.name)
        self.client = connection
        selector.register(connection, selectors.EVENT_READ, "input")
        selector.register(self.master, selectors.EVENT_READ, "output")

    def _output(self) -> bool:
        """Sends what the terminal shows; False once it has nothing more to show (or, when
        draining, nothing more now)."""
        try:
            data = os.read(self.master, READ_CHUNK)
        except OSError:  # EIO: the program and everything that had the terminal are gone
            return False
        if not data:
            return False
        self.log.write(data)
        assert self.client is not None
        try:
            self.client.sendall(terminal.frame(terminal.DATA, data))
        except OSError:
            self.stopped = True
        return True

    def _input(self) -> bool:
        """Passes on what the user typed and their window's size; False when the relay
        closed (or sent what is not a frame)."""
        assert self.client is not None
        try:
            data = self.client.recv(READ_CHUNK)
            frames = self.frames.feed(data) if data else None
        except (OSError, terminal.BadFrame):
            return False
        if frames is None:
            return False
        for kind, payload in frames:
            if kind == terminal.DATA:
                _write_all(self.master, payload)
            else:
                rows, cols = terminal.window(payload)
                # Sends SIGWINCH to the foreground group: full-screen programs redraw.
                fcntl.ioctl(self.master, termios.TIOCSWINSZ, WINSIZE.pack(rows, cols, 0, 0))
        return True

    def _drain(self) -> None:
        """The program's last words, once it has exited, to the relay."""
        os.set_blocking(self.master, False)
        while not self.stopped and self._output():
            pass

    def _reap_orphans(self) -> None:
        """Reaps the exited processes this subreaper adopted (never the program itself,
        whose status `Popen` keeps)."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == self.child.pid:
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)

    def _hang_up(self) -> None:
        """SIGHUP, SIGTERM, SIGCONT to every process of this runner's session and every
        descendant; SIGKILL to what is left after `HANGUP_GRACE_S`. Reaps them all, and
        keeps the program's own status."""
        me = os.getpid()
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGCONT):
            _send(session_and_descendants(me), sig)
        self._reap_until_gone()
        _send(session_and_descendants(me), signal.SIGKILL)
        self._reap_until_gone()  # what SIGKILL cannot end at once is given as long
        self._reap()

    def _reap_until_gone(self) -> None:
        """Reaps until nothing of the session is left, for `HANGUP_GRACE_S` at most."""
        deadline = time.monotonic() + HANGUP_GRACE_S
        while session_and_descendants(os.getpid()) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.02)

    def _reap(self) -> None:
        if self.exit_status is None:
            self.exit_status = self.child.poll()
        self._reap_orphans()

    def _end(self, terminal_closed: bool) -> bool:
        """Hangs up the session, everything in it and everything it started."""
        self._hang_up()
        for closing in (self.client, self.listener):
            if closing is not None:
                closing.close()
        with contextlib.suppress(OSError):
            os.close(self.master)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.run.terminal.name)
        self.log.close()
        return terminal_closed


def _send(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def run_session(run: RunDir, plan: dict[str, Any], began: float) -> int:
    """Runs the session of `run` as `plan` says; the runner's exit code."""
    session = Session(run, plan)
    record_start(run, session.child, began)
    EventWriter(run.events).emit(Event.running, pid=session.child.pid)
    terminal_closed = session.serve()
    assert session.exit_status is not None
    return end_with(run, session.exit_status, terminal_closed=terminal_closed)
