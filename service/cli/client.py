"""A thin HTTP client for the gpuq API, reading `GPUQ_URL` and `GPUQ_TOKEN`."""

import os
from collections.abc import Iterator
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


class ApiError(Exception):
    """The server refused the request, or could not be reached; the message says why."""


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(detail, list):  # validation errors: one line per field
        return "\n".join(
            f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in detail
        )
    return str(detail)


class Client:
    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.url = (url or os.environ.get("GPUQ_URL") or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("GPUQ_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(
                f"cannot reach gpuq at {self.url} ({exc}); is `gpuq serve` running?"
            ) from exc
        if response.status_code >= 400:
            raise ApiError(f"{response.status_code}: {_detail(response)}")
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def stream(self, path: str, **params: Any) -> Iterator[bytes]:
        """The response body as it comes; an error status raises `ApiError` first."""
        try:
            with self._http.stream("GET", path, params=params, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(f"{response.status_code}: {_detail(response)}")
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ApiError(f"cannot reach gpuq at {self.url} ({exc})") from exc
