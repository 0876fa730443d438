"""The dashboard at `/` in a real headless Chromium, against a running gpuq."""

import json
import os
import subprocess
from collections.abc import Iterator
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
    assert "succeeded" in browser.eval("document.querySelector('#job-detail').innerText")

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
