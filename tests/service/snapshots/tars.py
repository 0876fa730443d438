"""Real tar files made with Python's tarfile, and what the tests of the snapshot store
share: tokens, the store's folder."""

import hashlib
import io
import tarfile
from pathlib import Path

from service.settings import Settings
from service.snapshots.store import folder_of


def make_tar(files: dict[str, bytes], *extra: tarfile.TarInfo) -> bytes:
    """An uncompressed tar of `files` (name → content), then the members `extra` (no data)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return buffer.getvalue()


def member(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    """A member with no data: a link, a device, a FIFO, a folder."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def upload(api, token: str, data: bytes, **params: str):
    return api.post(
        "/v1/snapshots",
        content=data,
        params=params,
        headers={**auth(token), "Content-Type": "application/x-tar"},
    )


def store_entries(settings: Settings) -> list[str]:
    """What the store's folder holds, by name."""
    folder = folder_of(settings)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def stored_path(settings: Settings, data: bytes) -> Path:
    return folder_of(settings) / f"{sha(data)}.tar"
