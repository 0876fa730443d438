"""Who made a loopback TCP connection, by the kernel's list of this machine's sockets."""

import os
import socket
import subprocess

import pytest

from service.api import loopback_peer
from service.api.loopback_peer import tcp_peer_uid


@pytest.fixture(params=["sock_diag", "proc"], autouse=True)
def way(request, monkeypatch):
    """Each test asks by netlink, then by the tables that stand in where it is closed."""
    if request.param == "proc":

        def closed(*_):
            raise OSError("netlink closed")

        monkeypatch.setattr(loopback_peer, "_ask_netlink", closed)
    else:
        monkeypatch.setattr(loopback_peer, "_read_tables", lambda _: pytest.fail("no netlink"))


@pytest.mark.parametrize(
    ("family", "host"),
    [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"), (socket.AF_INET6, "::")],
)
def test_the_client_sockets_owner_is_found(family, host):
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        target = "::1" if host == "::" else host
        with socket.create_connection((target, port)):
            server_side, _ = listener.accept()
            with server_side:
                peer, local = server_side.getpeername(), server_side.getsockname()
                assert tcp_peer_uid(peer[:2], local[:2]) == os.geteuid()
                # From the other side, the connection's other socket: also root's.
                assert tcp_peer_uid(local[:2], peer[:2]) == os.geteuid()
        assert tcp_peer_uid(peer[:2], local[:2]) is None  # gone


def test_another_accounts_connection_is_its_own():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        other = subprocess.Popen(  # as nobody: waits for an answer that never comes
            ["curl", "-s", "-m", "30", f"http://127.0.0.1:{port}/"], user=65534, cwd="/"
        )
        try:
            server_side, _ = listener.accept()
            with server_side:
                found = tcp_peer_uid(server_side.getpeername(), server_side.getsockname())
                assert found == 65534
        finally:
            other.kill()
            other.wait()
