"""Headless Chromium driven over the DevTools protocol: load a page, wait, screenshot.

Chromium is Debian's `chromium` package, which `make test` installs (see
`scripts/ensure-command`); a test that needs it fails, never skips, when it is absent.
"""

import base64
import itertools
import json
import shutil
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from tests.e2e.server import free_port

FLAGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in CI containers
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--window-size=1400,1000",
]


class Browser:
    def __init__(self, profile: Path) -> None:
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        assert binary, "Chromium is missing: `make test` installs it (scripts/ensure-command)"
        port = free_port()
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--remote-debugging-port={port}", f"--user-data-dir={profile}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._ids = itertools.count(1)
        self._closing = ExitStack()
        self.ws = self._attach(f"http://127.0.0.1:{port}")
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _attach(self, devtools: str) -> ClientConnection:
        deadline = time.monotonic() + 30
        while True:
            try:
                targets = httpx.get(f"{devtools}/json/list", timeout=2).json()
                pages = [t for t in targets if t["type"] == "page"]
                if pages:
                    url = pages[0]["webSocketDebuggerUrl"]
                    return self._closing.enter_context(connect(url, max_size=None))
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Chromium's DevTools endpoint did not come up"
            time.sleep(0.2)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Sends one DevTools command and returns its result (events meanwhile are dropped)."""
        call_id = next(self._ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == call_id:
                assert "error" not in message, message["error"]
                result: dict[str, Any] = message["result"]
                return result

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def _evaluate(self, expression: str) -> dict[str, Any]:
        return self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )

    def eval(self, expression: str) -> Any:
        """The expression's value in the page; fails if it throws."""
        result = self._evaluate(expression)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout_s: float = 20) -> Any:
        """Evaluates `expression` until it is truthy (a page still loading may throw);
        fails with its last value."""
        deadline = time.monotonic() + timeout_s
        while not (value := self._try(expression)):
            assert time.monotonic() < deadline, f"never true in the page: {expression} ({value})"
            time.sleep(0.1)
        return value

    def _try(self, expression: str) -> Any:
        result = self._evaluate(expression)
        return None if "exceptionDetails" in result else result["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        png = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return png

    def close(self) -> None:
        self._closing.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)
