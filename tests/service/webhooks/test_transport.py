"""Deliveries over a real network to real receivers on 127.0.0.1: refused unless allowed,
judged on the addresses a name resolves to when sent, connected to the very address judged,
and told to the owner coarsely."""

import logging
import socket
import threading
import time
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpuq.contract.spec import JobSpec
from service.addresses import AllowList
from service.public import WebhookDeliveryPublic
from service.runtime import open_api
from service.settings import Settings
from service.store.db import Database, utcnow
from service.store.tables import Job, WebhookDelivery
from service.webhooks import job_deliveries, queue_event
from service.webhooks.delivery import COULD_NOT_CONNECT, NO_ANSWER, TIMED_OUT, post
from service.webhooks.notifier import Notifier
from service.webhooks.transport import REFUSED, client
from tests.conftest import ANA, job_spec

LOOPBACK = AllowList.parse("127.0.0.1/32")


class Receiver:
    """An HTTP server on a free loopback port that records each POST and answers `status`."""

    def __init__(self, status: int = 204, headers: dict[str, str] | None = None) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.path, dict(self.headers.items())))
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def receiving(**options: Any) -> closing[Receiver]:
    return closing(Receiver(**options))


def delivery(url: str) -> WebhookDelivery:
    body = {"event": "idle", "delivery": 1, "at": utcnow().isoformat(), "job": {"id": 7}}
    return WebhookDelivery(
        id=1, job_id=7, owner="ana", event="idle", url=url, body=body, next_at=utcnow()
    )


def send(url: str, allow: AllowList = AllowList(), timeout_s: float = 5.0) -> dict[str, Any]:
    with client(allow, timeout_s) as http:
        return post(http, delivery(url), "s3cret")


@pytest.fixture
def resolver(monkeypatch) -> list[str]:
    """Names under `.example.org` resolve as `ANSWERS` says (others not at all); the names
    asked, in order."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".example.org"):
            asked.append(host)
            if host not in ANSWERS:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
                for address in ANSWERS[host]
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


ANSWERS = {
    "loopback.example.org": ["127.0.0.1"],
    "metadata.example.org": ["169.254.169.254"],
    "mixed.example.org": ["8.8.8.8", "127.0.0.1"],  # one public answer is not enough
}


def test_a_receiver_on_loopback_gets_nothing_unless_allowed():
    with receiving() as hook:
        url = f"http://127.0.0.1:{hook.port}/hook/s3cr3t-path"
        refused = send(url)
        assert refused["error"] == REFUSED == "refused: address not allowed (GPUQ_WEBHOOK_ALLOW)"
        assert (refused["status_code"], refused["duration_ms"]) == (None, None)
        assert hook.requests == []
        delivered = send(url, LOOPBACK)
        assert (delivered["status_code"], delivered["error"]) == (204, None)
        assert delivered["duration_ms"] >= 0
        assert [path for path, _ in hook.requests] == ["/hook/s3cr3t-path"]
        assert send(f"http://[::ffff:127.0.0.1]:{hook.port}/")["error"] == REFUSED
        assert len(hook.requests) == 1


def test_a_name_that_resolves_to_loopback_is_refused_when_sent(resolver):
    with receiving() as hook:
        assert send(f"http://localhost:{hook.port}/hook")["error"] == REFUSED
        for name in ("loopback", "metadata", "mixed"):
            assert send(f"http://{name}.example.org:{hook.port}/hook")["error"] == REFUSED
        assert hook.requests == []
        assert send(f"http://localhost:{hook.port}/", AllowList.parse("localhost"))["status_code"]
        assert len(hook.requests) == 1


def test_the_connection_goes_to_the_address_that_was_judged(resolver):
    with receiving() as hook:
        url = f"http://loopback.example.org:{hook.port}/hook"
        assert send(url, LOOPBACK)["status_code"] == 204
        # Resolved once: connecting asked nothing more, so no second answer could differ.
        assert resolver == ["loopback.example.org"]
        [(_, headers)] = hook.requests
        assert headers["Host"] == f"loopback.example.org:{hook.port}"


def test_failures_are_told_to_the_owner_coarsely_and_to_the_log_in_detail(resolver, caplog):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: the connection is refused
    silent = socket.socket()  # listens, accepts (the kernel does), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    rude = socket.socket()  # accepts and hangs up at once
    rude.bind(("127.0.0.1", 0))
    rude.listen()

    def hang_up() -> None:
        connection, _ = rude.accept()
        connection.close()

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        with receiving() as hook, caplog.at_level(logging.INFO, "service.webhooks.delivery"):
            seen = {
                "refused": send(f"http://127.0.0.1:{closed_port}/s3cr3t", LOOPBACK),
                "no TLS": send(f"https://127.0.0.1:{hook.port}/s3cr3t", LOOPBACK),
                "no such name": send("http://nowhere.example.org/s3cr3t", LOOPBACK),
                "silent": send(f"http://127.0.0.1:{silent.getsockname()[1]}/", LOOPBACK, 0.3),
                "hung up": send(f"http://127.0.0.1:{rude.getsockname()[1]}/", LOOPBACK),
            }
    finally:
        silent.close()
        rude.close()
    errors = {what: attempt["error"] for what, attempt in seen.items()}
    assert errors == {
        "refused": COULD_NOT_CONNECT,
        "no TLS": COULD_NOT_CONNECT,
        "no such name": COULD_NOT_CONNECT,
        "silent": TIMED_OUT,
        "hung up": NO_ANSWER,
    }
    # No timing either: it would tell a closed port from a filtered one.
    assert {attempt["duration_ms"] for attempt in seen.values()} == {None}
    assert "job 7: webhook delivery 1 to 127.0.0.1: ConnectError: " in caplog.text
    assert "ReadTimeout" in caplog.text and "SSL" in caplog.text
    assert "s3cr3t" not in caplog.text


def test_no_proxy_from_the_environment_and_no_redirect_is_followed(monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # would be "could not connect"
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    away = {"Location": "http://169.254.169.254/latest/meta-data/"}
    with receiving(status=307, headers=away) as hook:
        attempt = send(f"http://127.0.0.1:{hook.port}/hook", LOOPBACK)
        assert (attempt["status_code"], attempt["error"]) == (307, None)
        assert len(hook.requests) == 1


def make(db: Database, settings: Settings, url: str) -> int:
    """A job with a webhook to `url`, submitted while the rule let it (it allowed loopback)."""
    spec = JobSpec.model_validate(job_spec(webhook=url))
    then = open_api(settings.model_copy(update={"webhook_allow": "127.0.0.1/32"}))
    try:
        job = Job.model_validate(then.jobs.submit(spec, ANA).row)
    finally:
        then.close()
    assert job.id is not None
    with db.write() as session:
        row = session.get(Job, job.id)
        assert row is not None
        queue_event(session, row, "idle")
    return job.id


def settled(db: Database, job_id: int) -> WebhookDeliveryPublic:
    deadline = time.monotonic() + 30
    while True:
        [row] = job_deliveries(db, job_id, ANA)
        if row.state != "pending":
            return WebhookDeliveryPublic.model_validate(row.model_dump())
        assert time.monotonic() < deadline, "the delivery was never tried"
        time.sleep(0.05)


@pytest.mark.parametrize("allow", ["", "127.0.0.1/32"])
def test_the_notifier_refuses_or_delivers_as_the_setting_says(db, settings, allow):
    with receiving() as hook:
        job_id = make(db, settings, f"http://127.0.0.1:{hook.port}/hook")
        once = settings.model_copy(update={"webhook_attempts": 1, "webhook_allow": allow})
        notifier = Notifier(db, once)
        notifier.start()
        try:
            seen = settled(db, job_id)
        finally:
            notifier.stop()
    [attempt] = seen.attempts
    if allow:
        assert (seen.state, attempt.status_code, attempt.error) == ("delivered", 204, None)
        assert len(hook.requests) == 1
    else:
        assert (seen.state, attempt.status_code, attempt.error) == ("failed", None, REFUSED)
        assert attempt.duration_ms is None and hook.requests == []
