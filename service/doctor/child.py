"""A probe child (`python -m worker.probe ...`), spoken to one JSON line at a time."""

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.runspec import device_environment


class ProbeFailed(RuntimeError):
    """The child died, said something else, or said nothing in time; the message ends with
    the last line of its stderr."""


def probe_environment(devices: DevicePlan, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment a job given `devices` gets (`device_environment`), and `extra`."""
    env = device_environment(os.environ, devices)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"  # a probe's output is its JSON lines
    env.update(extra)
    return env


class ProbeChild:
    def __init__(self, *args: str, env: Mapping[str, str]) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "worker.probe", *args],
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self._buffer = b""

    def __enter__(self) -> "ProbeChild":
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        self._stderr.close()

    def read(self, timeout_s: float) -> dict[str, Any]:
        """The child's next JSON line."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProbeFailed(f"no answer in {timeout_s:g} s{self._last_words()}")
                if not selector.select(left):
                    continue
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    self.process.wait()
                    raise ProbeFailed(
                        f"exited with code {self.process.returncode}{self._last_words()}"
                    )
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            said = json.loads(line)
        except ValueError:
            raise ProbeFailed(f"said {line[:200]!r}{self._last_words()}") from None
        if not isinstance(said, dict):
            raise ProbeFailed(f"said {line[:200]!r}")
        return said

    def go_on(self) -> None:
        """Lets the child take its next step."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"\n")
        self.process.stdin.flush()

    def finish(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise ProbeFailed(f"did not exit in {timeout_s:g} s") from None

    def _last_words(self) -> str:
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read().decode(errors="replace").splitlines() if line]
        return f": {lines[-1].strip()[:300]}" if lines else ""
