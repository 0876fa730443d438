"""A thin HTTP client for the gpuq API, reading `GPUQ_URL` and `GPUQ_TOKEN`; with neither
a URL nor `GPUQ_URL`, the local socket (`GPUQ_SOCKET`, default `$GPUQ_HOME/gpuq.sock`) when
it exists, where the server knows the caller by their Unix account.

It knows paths and JSON, not the shapes of jobs: the CLI prints what comes back as it is,
and `gpuq.client` builds typed objects on top of it.
"""

import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import httpx

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

from gpuq.contract.states import TERMINAL

DEFAULT_URL = "http://127.0.0.1:8000"
#: the host part of requests over the local socket (any name would do)
SOCKET_BASE_URL = "http://gpuq.socket"


def local_socket(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The server's local socket if its file exists; None otherwise."""
    given = environ.get("GPUQ_SOCKET")
    if given == "-":
        return None
    path = Path(given) if given else Path(environ.get("GPUQ_HOME", ".gpuq")) / "gpuq.sock"
    return path if path.is_socket() else None


#: The longest a long poll waits for a change before it asks again.
POLL_WAIT_S = 30.0


class ApiError(Exception):
    """The server refused the request, or could not be reached; the message says why.

    `status_code` is the HTTP status (e.g. 404), or None when no answer came; `errors`, a
    422's refusals one by one (`loc`, the field's path from `body`, and `msg`).
    """

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.errors = errors or []


def _refused(response: httpx.Response) -> ApiError:
    """The server's refusal: its words (a 422's one line per field) and its errors."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):  # not JSON, or not an object
        words = response.text.strip() or response.reason_phrase
        return ApiError(f"{response.status_code}: {words}", response.status_code)
    if not isinstance(detail, list):
        return ApiError(f"{response.status_code}: {detail}", response.status_code)
    errors = [e for e in detail if isinstance(e, dict)]
    words = "\n".join(
        f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in errors
    )
    return ApiError(f"{response.status_code}: {words}", response.status_code, errors)


class Client:
    """Requests to one gpuq server; every failure is an `ApiError` with a readable message.

    `url` and `token` default to `GPUQ_URL` and `GPUQ_TOKEN`. `http` replaces the
    underlying `httpx.Client` (tests pass an in-process one); it then carries the address
    and headers itself.
    """

    def __init__(
        self, url: str | None = None, token: str | None = None, *, http: httpx.Client | None = None
    ) -> None:
        self.url = (url or os.environ.get("GPUQ_URL") or DEFAULT_URL).rstrip("/")
        self._socket: Path | None = None
        self._headers: dict[str, str] = {}
        if http is not None:
            self.url = str(http.base_url).rstrip("/") or self.url
            self._http = http
            return
        token = token or os.environ.get("GPUQ_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._headers = headers
        sock = None if url or os.environ.get("GPUQ_URL") else local_socket()
        if sock is not None:
            self.url, self._socket = f"unix:{sock}", sock
            self._http = httpx.Client(
                base_url=SOCKET_BASE_URL,
                headers=headers,
                timeout=30.0,
                transport=httpx.HTTPTransport(uds=str(sock)),
            )
            return
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request (keyword arguments as for `httpx.Client.request`); raises on >= 400."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(
                f"cannot reach gpuq at {self.url} ({exc}); is `gpuq serve` running?"
            ) from exc
        if response.status_code >= 400:
            raise _refused(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The decoded JSON body of one request."""
        return self.request(method, path, **kwargs).json()

    def changes(self, job_id: int, timeout_s: float | None = None) -> Iterator[dict[str, Any]]:
        """Job `job_id` now, then each time it changes (long polls), until and including
        its final state; `TimeoutError` once `timeout_s` has passed without one."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        job = self.json("GET", f"/v1/jobs/{job_id}")
        yield job
        while job["status"] not in TERMINAL:
            wait_s = POLL_WAIT_S
            if deadline is not None:
                wait_s = min(wait_s, deadline - time.monotonic())
                if wait_s <= 0:
                    raise TimeoutError(f"job {job_id} is still {job['status']} after {timeout_s} s")
            params = {"wait_s": wait_s, "since": job["revision"]}
            job = self.json("GET", f"/v1/jobs/{job_id}", params=params, timeout=wait_s + 30)
            yield job

    def stream(self, path: str, **params: Any) -> Iterator[bytes]:
        """The response body as it comes; an error status raises `ApiError` first."""
        try:
            with self._http.stream("GET", path, params=params, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _refused(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ApiError(f"cannot reach gpuq at {self.url} ({exc})") from exc

    def terminal(self, job_id: int) -> "ClientConnection":
        """A WebSocket to running session `job_id`'s terminal (`gpuq shell`)."""
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect, unix_connect

        path = f"/v1/jobs/{job_id}/terminal"
        try:
            if self._socket is not None:
                return unix_connect(
                    str(self._socket),
                    f"ws://gpuq.socket{path}",
                    additional_headers=self._headers,
                    compression=None,
                )
            if not self.url.startswith("http"):
                raise ApiError(f"a terminal needs gpuq's own address, not {self.url}")
            address = "ws" + self.url.removeprefix("http") + path
            return connect(address, additional_headers=self._headers, compression=None)
        except (OSError, WebSocketException) as exc:
            raise ApiError(f"cannot reach the session's terminal at {self.url}: {exc}") from exc

    def download(self, path: str, target: Path, **params: Any) -> int:
        """Saves the body of `GET path` to `target` through a `.part` file, so a broken
        download never leaves a truncated file under the real name; returns its size."""
        part = target.with_name(target.name + ".part")
        size = 0
        try:
            with part.open("wb") as f:
                for chunk in self.stream(path, **params):
                    f.write(chunk)
                    size += len(chunk)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        part.replace(target)
        return size

    def close(self) -> None:
        """Closes the connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
