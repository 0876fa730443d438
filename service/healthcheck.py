"""`python -m service.healthcheck`: exits 0 if this host's `gpuq serve` answers
`/healthz` with 200 (API and scheduler alive), 1 if not, printing what it got.

The container image's `HEALTHCHECK`. Standard library only, as it runs every 30 s: the
address comes from `GPUQ_HOST` and `GPUQ_PORT` as `gpuq serve` reads them, with a
wildcard address asked on loopback.
"""

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping

WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def healthz_url(env: Mapping[str, str]) -> str:
    host = env.get("GPUQ_HOST", "127.0.0.1")
    host = WILDCARDS.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{env.get('GPUQ_PORT', '8000')}/healthz"


def main() -> int:
    url = healthz_url(os.environ)
    # Straight to gpuq: never through an HTTP proxy the container's environment names.
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(url, timeout=5) as reply:
            print(reply.read().decode(errors="replace"))
            return 0
    except urllib.error.HTTPError as exc:
        print(f"{url}: {exc.code} {exc.read().decode(errors='replace')}")
    except OSError as exc:
        print(f"{url}: {exc}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
