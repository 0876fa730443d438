"""Webhooks end to end: a real receiver on 127.0.0.1 checks signatures, answers 500 once,
hangs, or waits out a restart, while real jobs run."""

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest

from service.team import users
from service.webhooks import verify
from tests.conftest import command_spec, ended, serving, wait_for

pytestmark = pytest.mark.e2e
T = TypeVar("T")

QUICK = "print('done')"


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server on a free loopback port: answers each POST with the next of
    `answers` (then `default`), or never answers while `hang` is set."""

    answers: list[int] = field(default_factory=list)
    default: int = 200
    hang: bool = False
    requests: list[Received] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(Received(dict(self.headers.items()), body))
                if receiver.hang:
                    receiver.released.wait(60)  # then closes without an answer
                    return
                self.send_response(
                    receiver.answers.pop(0) if receiver.answers else receiver.default
                )
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def events(self, job_id: int) -> list[str]:
        return [r.json["event"] for r in self.requests if r.json["job"]["id"] == job_id]

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def receiving(**options: Any) -> Iterator[Receiver]:
    receiver = Receiver(**options)
    try:
        yield receiver
    finally:
        receiver.close()


@pytest.fixture
def settings(settings):
    return settings.model_copy(
        update={
            "webhook_timeout_s": 1.0,
            "webhook_backoff_s": 0.2,
            "webhook_attempts": 3,
            "allow_root_jobs": True,  # command jobs, where the tests run as root
            "webhook_allow": "127.0.0.1/32",  # the receivers: internal, allowed by an admin
        }
    )


def eventually(check: Callable[[], T], what: str, timeout_s: float = 60) -> T:
    """`check()` once it is truthy; fails after `timeout_s` with `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.05)


def submit(client, spec: dict[str, Any], headers: dict[str, str] | None = None) -> int:
    response = client.post("/v1/jobs", json=spec, headers=headers or {})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def hooked(url: str | None, code: str = QUICK, **resources: Any) -> dict[str, Any]:
    spec = command_spec(code, **(resources or {"gpus": 0}))
    return {**spec, "webhook": url} if url else spec


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_deliveries_are_signed_with_the_owners_secret(client):
    secret = client.get("/v1/webhook").json()["secret"]
    with receiving() as hook:
        job_id = submit(client, hooked(hook.url))
        wait_for(client, job_id, ended)
        eventually(lambda: "succeeded" in hook.events(job_id), "the final state was posted")
    assert "queued" not in hook.events(job_id)  # the owner just submitted it
    for request in hook.requests:
        assert verify(secret, request.body, request.headers["X-Gpuq-Signature"])
        assert request.headers["Content-Type"] == "application/json"
        assert request.headers["User-Agent"] == "gpuq"
        assert request.headers["X-Gpuq-Event"] == request.json["event"]
        assert request.headers["X-Gpuq-Delivery"] == str(request.json["delivery"])
    final = hook.requests[-1].json
    assert (final["event"], final["job"]["status"], final["job"]["exit_code"]) == (
        "succeeded",
        "succeeded",
        0,
    )
    rotated = client.put("/v1/webhook", json={"rotate_secret": True}).json()
    assert rotated["secret"] != secret
    last = hook.requests[-1]
    assert not verify(rotated["secret"], last.body, last.headers["X-Gpuq-Signature"])


def test_the_users_default_is_used_unless_the_spec_names_a_webhook(client):
    bad = client.put("/v1/webhook", json={"url": "ftp://127.0.0.1/x"})
    assert (bad.status_code, bad.json()["detail"][0]["loc"]) == (422, ["body", "url"])
    assert client.put("/v1/webhook", json={"colour": "red"}).status_code == 422
    with receiving() as default, receiving() as own:
        answer = client.put("/v1/webhook", json={"url": default.url}).json()
        assert answer["url"] == default.url
        assert client.get("/v1/webhook").json()["url"] == default.url
        by_default = submit(client, hooked(None))
        by_spec = submit(client, hooked(own.url))
        for job_id in (by_default, by_spec):
            wait_for(client, job_id, ended)
        eventually(lambda: "succeeded" in default.events(by_default), "the default got it")
        eventually(lambda: "succeeded" in own.events(by_spec), "the spec's webhook got it")
        assert default.events(by_spec) == [] and own.events(by_default) == []
    assert client.put("/v1/webhook", json={"url": None}).json()["url"] is None


def test_a_500_is_retried_and_the_attempts_are_the_owners_to_see(client):
    db = client.app.state.service.db
    ana, bo, root = (
        auth(users.add_user(db, "ana")),
        auth(users.add_user(db, "bo")),
        auth(users.add_user(db, "root", admin=True)),
    )
    with receiving(answers=[500]) as hook:
        job_id = submit(client, hooked(hook.url), headers=ana)
        eventually(
            lambda: client.get(f"/v1/jobs/{job_id}", headers=ana).json()["finished_at"], "end"
        )

        def settled() -> list[dict[str, Any]]:
            page = client.get(f"/v1/jobs/{job_id}/webhooks", headers=ana).json()
            states = {d["state"] for d in page["deliveries"]}
            finals = [d for d in page["deliveries"] if d["event"] == "succeeded"]
            return page["deliveries"] if finals and states == {"delivered"} else []

        deliveries = eventually(settled, "every delivery delivered")
    [retried] = [d for d in deliveries if len(d["attempts"]) == 2]
    assert [a["status_code"] for a in retried["attempts"]] == [500, 200]
    assert retried["url"] == hook.url and retried["finished_at"] is not None
    assert all(len(d["attempts"]) == 1 for d in deliveries if d is not retried)
    assert [d["id"] for d in deliveries] == sorted((d["id"] for d in deliveries), reverse=True)
    twice = [r for r in hook.requests if r.json["delivery"] == retried["id"]]
    assert len(twice) == 2 and twice[0].body == twice[1].body  # the same notification again

    refused = client.get(f"/v1/jobs/{job_id}/webhooks", headers=bo)
    assert refused.status_code == 403 and "belongs to ana" in refused.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}/webhooks", headers=root).status_code == 200
    assert client.get("/v1/jobs/999999/webhooks", headers=ana).status_code == 404
    # A webhook URL may embed a token: only the owner and admins see it.
    seen = {
        name: client.get(f"/v1/jobs/{job_id}", headers=who).json()["spec"]["webhook"]
        for name, who in (("ana", ana), ("bo", bo), ("root", root))
    }
    assert seen == {"ana": hook.url, "bo": None, "root": hook.url}
    listed = client.get("/v1/jobs", headers=bo).json()["jobs"]
    assert [j["spec"]["webhook"] for j in listed] == [None]


def test_a_hanging_receiver_holds_up_neither_jobs_nor_other_deliveries(settings):
    slow = settings.model_copy(update={"webhook_timeout_s": 120.0})
    with serving(slow) as client, receiving(hang=True) as stuck, receiving() as fine:
        hanging = submit(client, hooked(stuck.url))
        eventually(lambda: stuck.requests, "the hanging receiver was called")
        others = [submit(client, hooked(None, gpus=1)) for _ in range(3)]
        others.append(submit(client, hooked(fine.url)))
        for job_id in [hanging, *others]:
            assert wait_for(client, job_id, ended)["status"] == "succeeded"
        eventually(lambda: "succeeded" in fine.events(others[-1]), "the other receiver got it")
        page = client.get(f"/v1/jobs/{hanging}/webhooks").json()
        assert any(d["state"] == "pending" and not d["attempts"] for d in page["deliveries"])
        stuck.released.set()  # lets the service stop without waiting out the timeout


def test_deliveries_pending_at_shutdown_go_out_after_a_restart(settings):
    patient = settings.model_copy(update={"webhook_attempts": 100})
    with receiving(default=500) as hook:
        with serving(patient) as client:
            job_id = submit(client, hooked(hook.url))
            wait_for(client, job_id, ended)

            def refused_final() -> bool:
                page = client.get(f"/v1/jobs/{job_id}/webhooks").json()["deliveries"]
                return any(d["event"] == "succeeded" and d["attempts"] for d in page)

            eventually(refused_final, "the final state was tried and refused")
        hook.default = 200
        tried = len(hook.requests)
        with serving(patient) as client:
            deliveries = eventually(
                lambda: [
                    d
                    for d in client.get(f"/v1/jobs/{job_id}/webhooks").json()["deliveries"]
                    if d["state"] == "delivered" and d["event"] == "succeeded"
                ],
                "the final state delivered after the restart",
            )
    assert [a["status_code"] for a in deliveries[0]["attempts"]][-1] == 200
    assert len(hook.requests) > tried
