"""The dashboard at `/` in a real headless Chromium, against a running gpuq."""

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pexpect
import pytest

from tests.conftest import command_spec
from tests.e2e.browser import Browser
from tests.e2e.conftest import EPOCHS
from tests.e2e.server import GPUQ, Server

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(
    os.environ.get("GPUQ_TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts")
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    chromium = Browser(tmp_path / "profile")
    yield chromium
    chromium.close()


def count(selector: str) -> str:
    return f"document.querySelectorAll({selector!r}).length"


def test_the_dashboard_shows_gpus_a_loss_curve_per_epoch_and_the_log(trained, browser):
    job_id = trained.job["id"]
    browser.open(f"{trained.server.url}/#job={job_id}")
    browser.wait_until(f"{count('#gpus tbody tr.gpu')} === 2")
    loss_points = count('svg.chart[data-metric="loss"] circle.point[data-series="loss"]')
    assert browser.wait_until(f"{loss_points} === {EPOCHS} && {loss_points}")
    val_points = count('svg.chart[data-metric="loss"] circle.point[data-series="val_loss"]')
    assert browser.eval(val_points) == EPOCHS
    browser.wait_until(f"document.querySelector('#log').textContent.includes('epoch {EPOCHS}/')")
    ended = browser.eval(f"document.querySelector('#ended tr[data-job=\"{job_id}\"]').innerText")
    assert "succeeded" in ended
    detail = browser.eval("document.querySelector('#job-detail').innerText")
    assert "succeeded" in detail
    # Why it went where it did, and how it used what it held (simulated GPUs: unmeasured).
    assert "placed: GPU 0: whole" in detail
    assert "efficiency: GPU memory not measured (whole 8 GiB GPUs); ran " in detail
    # The box's cores and host memory beside the GPUs (GET /v1/host).
    host = browser.eval("document.querySelector('#host').innerText")
    assert "Host cores" in host and "Host memory" in host and "kept for gpuq" in host

    png = browser.screenshot(ARTIFACTS / "dashboard.png")
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_the_dashboard_shows_a_new_job_without_a_reload(trained, browser):
    browser.open(trained.server.url)
    browser.wait_until("document.body.dataset.loaded === 'true'")
    spec = command_spec("import time; time.sleep(4)", gpus=0)
    job_id = httpx.post(f"{trained.server.url}/v1/jobs", json=spec).json()["id"]
    browser.wait_until(f"!!document.querySelector('#running tr[data-job=\"{job_id}\"]')", 10)
    browser.wait_until(f"!!document.querySelector('#ended tr[data-job=\"{job_id}\"]')", 20)


def test_with_users_the_dashboard_asks_for_a_token_and_uses_it(tmp_path, browser):
    server = Server(tmp_path / "gpuq")
    added = subprocess.run(
        [*GPUQ, "users", "add", "ana", "--json"],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    token = json.loads(added.stdout)["token"]
    server.start("--api-only")
    try:
        browser.open(server.url)
        browser.wait_until("document.querySelector('#auth').classList.contains('shown')")
        assert browser.eval(count("#gpus tbody tr.gpu")) == 0
        browser.eval(
            f"document.querySelector('#token').value = {token!r};"
            "document.querySelector('#auth').requestSubmit()"
        )
        browser.wait_until(f"{count('#gpus tbody tr.gpu')} === 2")
        assert not browser.eval("document.querySelector('#auth').classList.contains('shown')")
    finally:
        server.kill()


def test_the_dashboard_shows_a_session_as_one(trained, browser):
    shell = pexpect.spawn(
        GPUQ[0],
        [*GPUQ[1:], "shell", "--gpus", "0", "--env", "PS1", "--", "/bin/sh"],
        env={**trained.server.env, "PS1": "READY> "},
        encoding="utf-8",
        timeout=60,
    )
    shell.expect(r"gpuq: job (\d+) ")
    job_id = int(shell.match.group(1))
    shell.expect("READY> ")
    browser.open(trained.server.url)
    row = f"document.querySelector('#running tr[data-job=\"{job_id}\"]')"
    browser.wait_until(f"!!{row}", 10)
    text = browser.eval(f"{row}.textContent")
    assert "session" in text and "interactive · open since" in text, text
    shell.sendline("exit")
    shell.expect(pexpect.EOF)
    browser.wait_until(f"!!document.querySelector('#ended tr[data-job=\"{job_id}\"]')", 20)


def test_the_sweep_view_overlays_every_members_curve_beside_the_leaderboard(trained, browser):
    code = (
        "import os; from gpuq import report; lr = float(os.environ['GPUQ_PARAM_LR'])\n"
        "for epoch in range(1, 6): report(epoch, val_loss=lr * 10 / epoch)"
    )
    spec = {
        **command_spec(code, gpus=0),
        "name": "lr-sweep",
        "sweep": {"parameters": {"lr": [0.3, 0.1, 0.2]}, "max_parallel": 2, "metric": "val_loss"},
    }
    url = trained.server.url
    sweep = httpx.post(f"{url}/v1/sweeps", json=spec, timeout=30).json()
    browser.open(f"{url}/#sweep={sweep['id']}")
    browser.wait_until(f"!!document.querySelector('#sweeps tr[data-sweep=\"{sweep['id']}\"]')")
    curves = count("#sweep-curves path.curve")
    ranked = "[...document.querySelectorAll('#sweep-board tr.member')].map((r) => r.innerText)"
    rows = browser.wait_until(
        f"{curves} === 3 && {ranked}.every((t) => t.includes('succeeded')) && {ranked}", 60
    )
    # The best (lowest) first: lr 0.1 ended at 0.1 * 10 / 5 = 0.2.
    assert [row.split("\t")[0] for row in rows] == ["1", "2", "3"]
    assert "0.1" in rows[0].split("\t")[2] and "0.2000" in rows[0]
    thickest = "#sweep-curves path.curve[stroke-width='3.5']"
    best = browser.eval(f'document.querySelector("{thickest}").dataset.job')
    assert int(best) == next(m["job_id"] for m in sweep["members"] if m["params"]["lr"] == 0.1)
    browser.eval("document.querySelector('#sweep').scrollIntoView()")
    png = browser.screenshot(ARTIFACTS / "sweep.png")
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_a_job_without_a_total_shows_its_epoch_and_metric_and_no_job_a_log_hint(
    trained, browser, tmp_path
):
    go = tmp_path / "go"
    code = (
        "import os, time; from gpuq import report\n"
        "report(27, loss=0.2, val_loss=0.1523)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)"
    )
    url = trained.server.url
    job_id = httpx.post(f"{url}/v1/jobs", json=command_spec(code, gpus=0)).json()["id"]
    row = f"document.querySelector('#running tr[data-job=\"{job_id}\"]')"
    try:
        browser.open(url)
        browser.wait_until("document.body.dataset.loaded === 'true'")
        # No job chosen: a hint where the log goes, not an empty black box.
        hint = browser.eval("document.querySelector('#log-hint').innerText")
        assert hint == "Choose a job in the lists above to follow its log."
        assert browser.eval("document.querySelector('#log').offsetParent") is None
        # Epochs without a total: the latest epoch and val_loss, never a 0 % bar.
        text = browser.wait_until(f"{row}?.innerText.includes('epoch 27') && {row}.innerText", 30)
        assert "epoch 27 · val_loss 0.152" in text and "%" not in text, text
        assert browser.eval(f"{row}.querySelectorAll('.bar').length") == 0
        browser.eval(f"{row}.click()")
        detail = "document.querySelector('#job-detail').innerText"
        assert "epoch 27 · val_loss 0.152" in browser.wait_until(
            f"{detail}.includes('epoch 27') && {detail}"
        )
        assert browser.eval("document.querySelector('#log-hint').offsetParent") is None
    finally:
        go.touch()


def test_reservations_show_on_the_gpus_and_on_a_timeline(tmp_path, browser):
    server = Server(tmp_path / "gpuq")
    server.start("--api-only")
    try:
        now = datetime.now(UTC)
        for name, gpu, starts_in in (("paper", 0, -30), ("demo", 1, 2 * 3600)):
            body = {
                "name": name,
                "gpu_ids": [gpu],
                "starts_at": (now + timedelta(seconds=starts_in)).isoformat(),
                "duration_s": 3600,
                "users": ["anonymous", "bo"],
            }
            booked = httpx.post(f"{server.url}/v1/reservations", json=body)
            assert booked.status_code == 201, booked.text
        browser.open(server.url)
        browser.wait_until(f"{count('#reservations tr.reservation')} === 2")
        gpus = browser.eval("[...document.querySelectorAll('#gpus tr.gpu')].map(r => r.innerText)")
        assert "reserved: paper (anonymous, bo) until" in gpus[0]
        assert "demo from" in gpus[1] and "reserved:" not in gpus[1]
        listed = browser.eval("document.querySelector('#reservations').innerText")
        assert "paper" in listed and "active" in listed and "upcoming" in listed
        # A bar per GPU on the timeline: GPU 0's from now, GPU 1's two hours on.
        lefts = browser.eval(
            "[...document.querySelectorAll('#reservations .timeline span')]"
            ".map(s => parseFloat(s.style.left))"
        )
        assert lefts[0] == 0 and 8 < lefts[1] < 9  # 2 h of 24 h: 8.3 %
        httpx.delete(f"{server.url}/v1/reservations/paper")
        httpx.delete(f"{server.url}/v1/reservations/demo")
        browser.eval("refresh()")
        browser.wait_until(
            "document.querySelector('#reservations').innerText.includes('no reservations')"
        )
    finally:
        server.kill()
