"""What `gpuq doctor --nodes N` runs on each compute node, through `srun`: it says which
interpreter and frameworks the node has, meets the other nodes in a folder under
`GPUQ_HOME` as a multi-node job's workers do (`gpuq.contract.nodes.meet`), and opens a TCP
connection to each of them at the address and port they announced.

It prints its findings as one `gpuq-node-probe {json}` line, which reaches the doctor
through `srun` even when the folder does not (no shared storage), and writes them to
`nodes/<rank>.result.json` too. It keeps listening until every node has written its
result (or `MEET_S` passes), so none is refused for having finished first. Standard
library and `gpuq` only, like the rest of what a job's node runs.
"""

import importlib.util
import json
import os
import platform
import socket
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from gpuq.contract.nodes import FOLDER, announcement, meet, node_address, this_task
from gpuq.contract.rundir import RunDir, write_json_atomic

#: how long a node waits for the others to announce themselves, then for their results
MEET_S = 60.0
CONNECT_S = 10.0
MARK = "gpuq-node-probe "
FRAMEWORKS = ("tensorflow", "torch")


def main(argv: list[str]) -> int:
    run = RunDir(Path(argv[1]))
    rank, nodes, node = this_task()
    listener = socket.create_server(("", 0))
    threading.Thread(target=_answer, args=(listener,), daemon=True).start()
    found: dict[str, Any] = {
        "rank": rank,
        "node": node,
        "python": sys.executable,
        "python_version": platform.python_version(),
        "gpuq": package_version("gpuq"),
        "frameworks": {name: importlib.util.find_spec(name) is not None for name in FRAMEWORKS},
        "reached": {},
    }
    record = announcement(
        rank,
        node,
        address=node_address(node),
        port=int(listener.getsockname()[1]),
        master_port=None,
        gpus=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    try:
        world = meet(run, record, nodes, MEET_S, "is GPUQ_HOME shared by every node?")
    except (OSError, TimeoutError) as exc:
        found["error"] = str(exc)
        return _report(run, found, nodes)
    for other in world:
        if other["rank"] != rank:
            found["reached"][other["node"]] = _reach(other["address"], int(other["port"]))
    return _report(run, found, nodes)


def _reach(address: str, port: int) -> str:
    """'ok', or why a connection to `address:port` failed."""
    try:
        with socket.create_connection((address, port), timeout=CONNECT_S) as s:
            s.settimeout(CONNECT_S)
            return "ok" if s.recv(16) == b"gpuq\n" else "connected, but no answer from gpuq"
    except OSError as exc:
        return f"{address}:{port}: {exc.strerror or exc}"


def _answer(listener: socket.socket) -> None:
    while True:
        connection, _ = listener.accept()
        with connection:
            connection.sendall(b"gpuq\n")


def _report(run: RunDir, found: dict[str, Any], nodes: int) -> int:
    print(MARK + json.dumps(found), flush=True)
    folder = run.path / FOLDER
    try:
        write_json_atomic(folder / f"{found['rank']}.result.json", found, durable=False)
    except OSError:
        return 0  # the doctor has the line above
    deadline = time.monotonic() + MEET_S
    while time.monotonic() < deadline and len(list(folder.glob("*.result.json"))) < nodes:
        time.sleep(0.05)
    return 0


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv))
