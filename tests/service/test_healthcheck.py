"""`python -m service.healthcheck`, the image's HEALTHCHECK: where it asks, and that a
gpuq that does not answer fails the check with the reason. (tests/deploy/test_container.py
sees Docker call it healthy.)"""

import os
import subprocess
import sys

from service.healthcheck import healthz_url
from tests.e2e.server import free_port


def test_it_asks_where_gpuq_serve_listens_and_a_wildcard_on_loopback():
    assert healthz_url({}) == "http://127.0.0.1:8000/healthz"
    assert healthz_url({"GPUQ_HOST": "0.0.0.0", "GPUQ_PORT": "9000"}) == (
        "http://127.0.0.1:9000/healthz"
    )
    assert healthz_url({"GPUQ_HOST": "::"}) == "http://[::1]:8000/healthz"
    assert healthz_url({"GPUQ_HOST": "10.1.2.3"}) == "http://10.1.2.3:8000/healthz"


def test_nothing_listening_fails_the_check_and_says_why():
    port = free_port()
    env = {**os.environ, "GPUQ_HOST": "0.0.0.0", "GPUQ_PORT": str(port)}
    done = subprocess.run(
        [sys.executable, "-m", "service.healthcheck"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert f"http://127.0.0.1:{port}/healthz" in done.stdout
    assert "Connection refused" in done.stdout
