"""`gpuq.client.Gpuq` against a real `gpuq serve` (command jobs: no TensorFlow needed)."""

import time
from collections.abc import Iterator

import pytest

from gpuq.client import Gpuq, Job
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from gpuq.http import ApiError
from tests.conftest import command_spec
from tests.e2e.server import Server

WRITES_A_FILE = (
    "import os, pathlib; print('training...'); print('done'); "
    "pathlib.Path(os.environ['GPUQ_ARTIFACTS_DIR'], 'out', 'result.txt').parent.mkdir(); "
    "pathlib.Path(os.environ['GPUQ_ARTIFACTS_DIR'], 'out', 'result.txt').write_text('42')"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("client") / "gpuq")
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture
def gq(server: Server) -> Iterator[Gpuq]:
    with Gpuq(server.url) as client:
        yield client


def test_submit_wait_and_read_the_logs(gq):
    job = gq.submit(command_spec(WRITES_A_FILE, gpus=1))
    assert isinstance(job, Job) and job.status == JobStatus.queued and not job.done
    assert job.name == "cmd" and job.owner == "anonymous"
    done = gq.wait(job.id, timeout_s=60)
    assert (done.id, done.status, done.exit_code, done.reason) == (job.id, "succeeded", 0, None)
    assert done.done and done.attempt == 1 and len(done.assigned_gpus) == 1
    assert done.revision > job.revision
    assert gq.get(job.id) == done
    assert gq.logs(job.id) == "training...\ndone\n"
    assert gq.logs(job.id, tail=1) == "done\n"


def test_artifacts_are_listed_and_downloaded(gq, tmp_path):
    job = gq.wait(gq.submit(command_spec(WRITES_A_FILE, gpus=0)).id, timeout_s=60)
    [artifact] = gq.artifacts(job.id)
    assert (artifact.name, artifact.size_bytes) == ("out/result.txt", 2)
    saved = gq.download(job.id, "out/result.txt", tmp_path / "answer.txt")
    assert saved == tmp_path / "answer.txt" and saved.read_text() == "42"
    into_folder = gq.download(job.id, "out/result.txt", tmp_path)
    assert into_folder == tmp_path / "result.txt" and into_folder.read_text() == "42"
    assert not list(tmp_path.glob("*.part"))


def test_a_jobspec_submits_like_a_dict_and_idempotency_keys_replay(gq):
    spec = JobSpec.model_validate(command_spec("pass", gpus=0))
    first = gq.submit(spec, idempotency_key="client-test-1")
    again = gq.submit(spec, idempotency_key="client-test-1")
    assert again.id == first.id
    assert gq.wait(first.id, timeout_s=60).status == "succeeded"


def test_cancel_stops_a_running_job(gq):
    job = gq.submit(command_spec("import time; time.sleep(60)", gpus=0))
    with pytest.raises(TimeoutError, match=f"job {job.id} is still"):
        gq.wait(job.id, timeout_s=0.5)
    gq.cancel(job.id)
    ended = gq.wait(job.id, timeout_s=60)
    assert (ended.status, ended.reason) == ("cancelled", "cancelled_by_user")


def test_hold_release_priority_and_preview(gq):
    blocker = gq.submit(command_spec("import time; time.sleep(60)", gpus=2))
    try:
        while gq.get(blocker.id).status == "queued":  # it holds both GPUs once it starts
            time.sleep(0.1)
        queued = gq.submit(command_spec("pass", gpus=2))
        assert gq.hold(queued.id).held is True
        assert gq.get(queued.id).held is True
        assert gq.release(queued.id).held is False
        preview = gq.preview(command_spec("pass", gpus=2))
        assert preview.would_start is False and preview.wait_reason
        assert preview.jobs_ahead == 1
        assert gq.set_priority(queued.id, -3).priority == -3
        assert gq.preview(command_spec("pass", gpus=2)).jobs_ahead == 0, "now it goes first"
        assert [j.id for j in gq.jobs(status=[JobStatus.queued])] == [queued.id]
        gq.cancel(queued.id)
    finally:
        gq.cancel(blocker.id)


def test_errors_raise_api_error_with_the_servers_message(gq, tmp_path):
    with pytest.raises(ApiError, match=r"^404: job 9999 not found$") as refused:
        gq.get(9999)
    assert refused.value.status_code == 404
    with pytest.raises(ApiError, match=r"resources\.gpus: 5 GPUs requested") as invalid:
        gq.submit(command_spec("pass", gpus=5))
    assert invalid.value.status_code == 422
    [error] = invalid.value.errors
    assert error["loc"] == ["body", "resources", "gpus"]
    assert error["msg"] == "5 GPUs requested but this box has 2"
    assert refused.value.errors == []
    job = gq.wait(gq.submit(command_spec("pass", gpus=0)).id, timeout_s=60)
    with pytest.raises(ApiError, match=r"^404: ") as missing:
        gq.download(job.id, "no-such-file.txt", tmp_path / "nothing.txt")
    assert missing.value.status_code == 404
    assert list(tmp_path.iterdir()) == [], "no file, not even a .part, is left behind"


def test_an_unreachable_server_is_an_api_error(server):
    with Gpuq("http://127.0.0.1:9") as nowhere, pytest.raises(ApiError) as down:
        nowhere.get(1)
    assert down.value.status_code is None
    assert "cannot reach gpuq at http://127.0.0.1:9" in str(down.value)
