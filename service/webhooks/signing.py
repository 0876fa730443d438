"""What a receiver checks: the exact bytes posted, signed with the owner's secret."""

import hashlib
import hmac
import json
from typing import Any

SIGNATURE_HEADER = "X-Gpuq-Signature"


def encode(body: dict[str, Any]) -> bytes:
    """The bytes posted for `body`; the signature covers exactly these."""
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def sign(secret: str, body: bytes) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of `body` keyed with `secret`."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: str, body: bytes, signature: str) -> bool:
    """What a receiver does (and the tests): compares in constant time."""
    return hmac.compare_digest(sign(secret, body), signature)


def headers(event: str, delivery_id: int, signature: str) -> dict[str, str]:
    """The headers of every POST."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "gpuq",
        "X-Gpuq-Event": event,
        "X-Gpuq-Delivery": str(delivery_id),
        SIGNATURE_HEADER: signature,
    }
