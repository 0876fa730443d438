"""A small Server-Sent Events reader for tests: what `curl -N` or EventSource would see."""

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx


def read_events(
    client: httpx.Client, url: str, *, opened: threading.Event | None = None, **params: Any
) -> Iterator[dict[str, Any]]:
    """Yields `{"id", "event", "data"}` per event (data parsed as JSON); comments skipped."""
    with client.stream("GET", url, params=params) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        if opened is not None:
            opened.set()
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line:
                if not line.startswith(":"):
                    name, _, value = line.partition(": ")
                    fields[name] = value
                continue
            if "data" in fields:
                yield {
                    "id": int(fields["id"]),
                    "event": fields["event"],
                    "data": json.loads(fields["data"]),
                }
            fields = {}
