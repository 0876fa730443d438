"""API throughput: submissions/s and polls/s with 1, 4 and 16 clients, beside a bare
FastAPI endpoint returning constant JSON, all measured in this run with wrk.

gpuq runs `--api-only` so accepted jobs stay queued (placement is measured elsewhere),
and both servers log at WARNING (no access log lines). Usage:
    python -m bench.api [--seconds 5]
"""

import argparse
import json
import tempfile
from pathlib import Path

import httpx

from bench.common import bare_server, gpuq_server, table, wrk

CLIENTS = (1, 4, 16)
TRIVIAL = {
    "name": "bench",
    "kind": "command",
    "command": {"argv": ["/bin/true"]},
    "resources": {"gpus": 0},
}


def post_script(folder: Path) -> Path:
    script = folder / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = '{json.dumps(TRIVIAL)}'\n"
    )
    return script


def run(seconds: float) -> list[list[str]]:
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        bare_server() as bare,
        gpuq_server("--api-only") as gpuq,
    ):
        job = httpx.post(f"{gpuq}/v1/jobs", json=TRIVIAL).json()
        script = post_script(Path(tmp))
        for clients in CLIENTS:
            base = wrk(f"{bare}/const", connections=clients, duration_s=seconds)
            poll = wrk(f"{gpuq}/v1/jobs/{job['id']}", connections=clients, duration_s=seconds)
            submit = wrk(f"{gpuq}/v1/jobs", connections=clients, duration_s=seconds, script=script)
            for what, load in (
                ("bare GET /const", base),
                ("gpuq GET /v1/jobs/{id}", poll),
                ("gpuq POST /v1/jobs", submit),
            ):
                ratio = f"{load.requests_per_s / base.requests_per_s:.2f}"
                rows.append(
                    [
                        what,
                        str(clients),
                        f"{load.requests_per_s:,.0f}",
                        f"{load.p50_ms:.2f}",
                        f"{load.p99_ms:.2f}",
                        ratio,
                        str(load.errors),
                    ]
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    rows = run(args.seconds)
    print(table(["endpoint", "clients", "req/s", "p50 ms", "p99 ms", "vs bare", "non-2xx"], rows))


if __name__ == "__main__":
    main()
