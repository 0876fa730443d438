"""`/v1/snapshots` through the real app: content-addressed storage, who may read what, the
store's modes, the size limit and the quota, and the members refused."""

import io
import os
import stat
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from service.snapshots.store import folder_of
from service.team import users
from tests.service.snapshots.tars import (
    auth,
    make_tar,
    member,
    sha,
    store_entries,
    stored_path,
    upload,
)

pytestmark = pytest.mark.backends("sqlite", "postgres")

MIB = 1024 * 1024
PROJECT = make_tar({"train.py": b"print('v1')\n", "lib/model.py": b"LAYERS = 3\n"})


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"snapshot_max_mb": 2, "snapshot_quota_mb": 3})


@pytest.fixture
def team(api):
    db = api.app.state.service.db
    tokens = {
        name: users.add_user(db, name, admin=name == "root") for name in ("root", "ana", "bo")
    }
    return api, tokens


def test_an_upload_is_stored_once_by_its_sha256(team, settings):
    api, tokens = team
    first = upload(api, tokens["ana"], PROJECT)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["sha256"] == sha(PROJECT)
    assert (body["size"], body["files"]) == (len(PROJECT), 2)
    path = stored_path(settings, PROJECT)
    assert path.read_bytes() == PROJECT
    before = os.stat(path)

    again = upload(api, tokens["ana"], PROJECT, sha256=sha(PROJECT))
    assert again.status_code == 200, again.text
    assert again.json()["sha256"] == body["sha256"]
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert store_entries(settings) == [path.name], "no second file, no temporary one left"


def test_the_store_is_gpuqs_alone(team, settings):
    api, tokens = team
    assert upload(api, tokens["ana"], PROJECT).status_code == 201
    folder, path = folder_of(settings), stored_path(settings, PROJECT)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.stat(path).st_uid == os.stat(folder).st_uid == os.geteuid()


def test_another_member_cannot_read_it_until_they_upload_the_same_bytes(team):
    api, tokens = team
    digest = upload(api, tokens["ana"], PROJECT).json()["sha256"]
    ana, bo, root = (auth(tokens[n]) for n in ("ana", "bo", "root"))
    assert api.head(f"/v1/snapshots/{digest}", headers=ana).status_code == 200
    assert api.get(f"/v1/snapshots/{digest}", headers=ana).status_code == 200

    assert api.head(f"/v1/snapshots/{digest}", headers=bo).status_code == 404
    # Refused in the words a snapshot nobody stored gets: bo never learns ana stored it.
    nobodys = "0" * 64
    for path in (f"/v1/snapshots/{digest}", f"/v1/snapshots/{digest}/tar"):
        refused = api.get(path, headers=bo)
        unknown = api.get(path.replace(digest, nobodys), headers=bo)
        assert refused.status_code == unknown.status_code == 404
        assert refused.json()["detail"] == unknown.json()["detail"].replace(nobodys, digest)
    assert api.get("/v1/snapshots", headers=bo).json()["snapshots"] == []

    # An admin reads any; a HEAD says only whether the caller stored it.
    assert api.get(f"/v1/snapshots/{digest}", headers=root).status_code == 200
    assert api.get(f"/v1/snapshots/{digest}/tar", headers=root).content == PROJECT
    assert api.head(f"/v1/snapshots/{digest}", headers=root).status_code == 404

    # bo's first upload of the same bytes reads as anyone's first: new, stored now.
    bos = upload(api, tokens["bo"], PROJECT)
    assert bos.status_code == 201
    assert (
        bos.json()["created_at"]
        > api.get(f"/v1/snapshots/{digest}", headers=ana).json()["created_at"]
    )
    assert upload(api, tokens["bo"], PROJECT).status_code == 200  # bo's own, again
    assert api.head(f"/v1/snapshots/{digest}", headers=bo).status_code == 200
    tar = api.get(f"/v1/snapshots/{digest}/tar", headers=bo)
    assert (tar.status_code, tar.headers["content-type"]) == (200, "application/x-tar")
    assert tar.content == PROJECT


def test_unknown_and_malformed_names(team):
    api, tokens = team
    ana = auth(tokens["ana"])
    unknown = "0" * 64
    assert api.get(f"/v1/snapshots/{unknown}", headers=ana).status_code == 404
    assert api.get(f"/v1/snapshots/{unknown}/tar", headers=ana).status_code == 404
    assert api.head(f"/v1/snapshots/{unknown}", headers=ana).status_code == 404
    for bad in ("abc", "A" * 64, "../" + "0" * 61, "0" * 65):
        response = api.get(f"/v1/snapshots/{bad}", headers=ana)
        assert response.status_code in (404, 422), (bad, response.text)
        if response.status_code == 422:
            assert response.json()["detail"][0]["loc"] == ["path", "sha256"]
    response = api.get("/v1/snapshots/" + "A" * 64, headers=ana)
    assert response.status_code == 422
    assert upload(api, tokens["ana"], PROJECT, sha256="xyz").status_code == 422


def test_the_listing_is_the_callers_newest_first_against_the_quota(team):
    api, tokens = team
    second = make_tar({"train.py": b"print('v2')\n"})
    for data in (PROJECT, second):
        assert upload(api, tokens["ana"], data).status_code == 201
    listing = api.get("/v1/snapshots", headers=auth(tokens["ana"])).json()
    assert [s["sha256"] for s in listing["snapshots"]] == [sha(second), sha(PROJECT)]
    assert listing["total_bytes"] == len(PROJECT) + len(second)
    assert listing["quota_bytes"] == 3 * MIB


def test_an_empty_body_or_a_changed_one_or_not_a_tar_is_400(team, settings):
    api, tokens = team
    empty = upload(api, tokens["ana"], b"")
    assert (empty.status_code, "empty" in empty.json()["detail"]) == (400, True)
    changed = upload(api, tokens["ana"], PROJECT, sha256="1" * 64)
    assert changed.status_code == 400
    assert f"sha256: the body's sha256 is {sha(PROJECT)}" in changed.json()["detail"]
    gzipped = io.BytesIO()
    with tarfile.open(fileobj=gzipped, mode="w:gz") as tar:
        tar.addfile(tarfile.TarInfo("empty"))
    crafted = tarfile.TarInfo("sparse")  # a pax header tarfile's parser raises ValueError on
    crafted.pax_headers = {"GNU.sparse.size": "x", "GNU.sparse.map": "1,2"}
    bodies = (b"not a tar at all" * 100, gzipped.getvalue(), PROJECT[:700], make_tar({}, crafted))
    for body in bodies:
        refused = upload(api, tokens["ana"], body)
        assert refused.status_code == 400, refused.text
        assert "not a readable tar" in refused.json()["detail"]
    assert store_entries(settings) == []


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (member("../escape", tarfile.REGTYPE), "'..'"),
        (member("lib/../../escape", tarfile.REGTYPE), "'..'"),
        (member("/etc/cron.d/evil", tarfile.REGTYPE), "absolute"),
        (member("dev/sda", tarfile.BLKTYPE), "device"),
        (member("dev/null", tarfile.CHRTYPE), "device"),
        (member("pipe", tarfile.FIFOTYPE), "FIFO"),
        (member("hard", tarfile.LNKTYPE, linkname="/etc/shadow"), "hard link"),
    ],
    ids=["dotdot", "dotdot-inside", "absolute", "block", "char", "fifo", "hardlink"],
)
def test_a_refused_member_is_400_naming_it(team, settings, bad, why):
    api, tokens = team
    data = make_tar({"train.py": b"pass\n"}, bad)
    response = upload(api, tokens["ana"], data)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert f"snapshot member {bad.name!r}" in detail
    assert why in detail
    assert store_entries(settings) == []


def test_a_symlink_out_is_stored_as_a_link_and_never_followed(team, settings, tmp_path):
    api, tokens = team
    secret = tmp_path / "secret"
    secret.write_text("never read by gpuq")
    data = make_tar(
        {"train.py": b"pass\n"},
        member("shadow", tarfile.SYMTYPE, linkname="/etc/shadow"),
        member("secret", tarfile.SYMTYPE, linkname=str(secret)),
    )
    with opens_recorded() as opened:
        response = upload(api, tokens["ana"], data)
    assert response.status_code == 201, response.text
    assert response.json()["files"] == 1
    assert [p for p in opened if "/.upload-" in p], "the watch sees the upload checked"
    assert not [p for p in opened if p in ("/etc/shadow", str(secret))]
    with tarfile.open(stored_path(settings, data)) as tar:
        links = {m.name: (m.issym(), m.linkname) for m in tar if m.name != "train.py"}
    assert links == {"shadow": (True, "/etc/shadow"), "secret": (True, str(secret))}


def test_over_the_size_limit_is_413_naming_the_setting(team, settings):
    api, tokens = team
    big = make_tar({"weights.bin": os.urandom(2 * MIB + 1)})
    response = upload(api, tokens["ana"], big)
    assert response.status_code == 413
    assert "GPUQ_SNAPSHOT_MAX_MB (2 MiB)" in response.json()["detail"]
    assert store_entries(settings) == [], "no temporary file left behind"


def test_past_the_quota_is_413_naming_the_setting_and_counts_once_per_owner(team, settings):
    api, tokens = team
    one, two = (make_tar({"w.bin": os.urandom(3 * MIB // 2)}) for _ in range(2))
    assert upload(api, tokens["ana"], one).status_code == 201
    refused = upload(api, tokens["ana"], two)
    assert refused.status_code == 413
    assert "GPUQ_SNAPSHOT_QUOTA_MB (3 MiB)" in refused.json()["detail"]
    assert upload(api, tokens["ana"], one).status_code == 200, "owned already: no more quota"
    # Bo's quota is his own: the bytes ana stored count once against each.
    assert upload(api, tokens["bo"], one).status_code == 201  # new to bo, as any first upload
    assert upload(api, tokens["bo"], one).status_code == 200
    assert upload(api, tokens["bo"], two).status_code == 413
    assert sorted(store_entries(settings)) == [f"{sha(one)}.tar"]


def test_a_lost_file_comes_back_with_the_next_upload(team, settings):
    api, tokens = team
    assert upload(api, tokens["ana"], PROJECT).status_code == 201
    stored_path(settings, PROJECT).unlink()
    digest = sha(PROJECT)
    assert api.get(f"/v1/snapshots/{digest}/tar", headers=auth(tokens["ana"])).status_code == 404
    assert api.head(f"/v1/snapshots/{digest}", headers=auth(tokens["ana"])).status_code == 404
    assert upload(api, tokens["ana"], PROJECT).status_code == 200
    assert stored_path(settings, PROJECT).read_bytes() == PROJECT


#: the lists `opens_recorded` is filling; the audit hook, once added, stays for good
RECORDING: list[list[str]] = []


@contextmanager
def opens_recorded() -> Iterator[list[str]]:
    """Every path the process opens meanwhile (the `open` audit event), in a list."""
    if not hasattr(opens_recorded, "hooked"):
        sys.addaudithook(_record_open)
        opens_recorded.hooked = True  # type: ignore[attr-defined]
    opened: list[str] = []
    RECORDING.append(opened)
    try:
        yield opened
    finally:
        RECORDING.remove(opened)


def _record_open(event: str, args: tuple) -> None:
    if event == "open" and RECORDING and isinstance(args[0], str | bytes | os.PathLike):
        for opened in RECORDING:
            opened.append(os.fsdecode(args[0]))
