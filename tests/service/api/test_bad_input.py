"""Every kind of bad input gets a 4xx naming the field, and never reaches a worker."""

import numpy as np
import pytest

from tests.conftest import job_spec


def field_error(response, loc: list, words: str) -> None:
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    matching = [e for e in errors if e["loc"] == loc]
    assert matching, f"no error at {loc}: {errors}"
    assert words in matching[0]["msg"], matching[0]["msg"]


def assert_nothing_queued(client) -> None:
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_missing_field(client):
    spec = job_spec()
    del spec["keras"]["data"]
    field_error(client.post("/v1/jobs", json=spec), ["body", "keras", "data"], "Field required")
    assert_nothing_queued(client)


def test_wrong_field_type(client):
    response = client.post("/v1/jobs", json=job_spec(keras={"epochs": "many"}))
    field_error(response, ["body", "keras", "epochs"], "integer")


def test_unknown_field(client):
    response = client.post("/v1/jobs", json=job_spec(resources={"gpu": 1}))
    field_error(response, ["body", "resources", "gpu"], "Extra inputs are not permitted")


def test_unknown_gpu_ids(client):
    response = client.post("/v1/jobs", json=job_spec(resources={"gpu_ids": [0, 7]}))
    field_error(response, ["body", "resources", "gpu_ids"], "no GPU with index 7")
    assert_nothing_queued(client)


def test_more_gpus_than_the_box_has(client):
    response = client.post("/v1/jobs", json=job_spec(resources={"gpus": 3}))
    field_error(response, ["body", "resources", "gpus"], "3 GPUs requested but this box has 2")


def test_cap_larger_than_a_gpu(client):
    response = client.post("/v1/jobs", json=job_spec(resources={"gpus": 1, "memory_mb": 9000}))
    field_error(response, ["body", "resources", "memory_mb"], "more than a GPU here has (8192 MiB)")


def test_cap_smaller_than_the_headroom(client):
    response = client.post("/v1/jobs", json=job_spec(resources={"gpus": 1, "memory_mb": 500}))
    field_error(response, ["body", "resources", "memory_mb"], "ask for at least 1024 MiB")


def test_nonexistent_data_path(client, tmp_path):
    data = {"source": "npz", "path": str(tmp_path / "missing.npz")}
    response = client.post("/v1/jobs", json=job_spec(keras={"data": data}))
    field_error(response, ["body", "keras", "data", "path"], "does not exist")


def test_relative_data_path(client):
    response = client.post(
        "/v1/jobs", json=job_spec(keras={"data": {"source": "npz", "path": "d.npz"}})
    )
    field_error(response, ["body", "keras", "data", "path"], "must be an absolute path")


def test_data_file_that_is_not_npz(client, tmp_path):
    bogus = tmp_path / "bogus.npz"
    bogus.write_text("not a zip")
    data = {"source": "npz", "path": str(bogus)}
    response = client.post("/v1/jobs", json=job_spec(keras={"data": data}))
    field_error(response, ["body", "keras", "data", "path"], "is not a readable .npz file")


def test_npz_without_the_named_array(client, tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, inputs=np.zeros((4, 2)), y=np.zeros(4))
    data = {"source": "npz", "path": str(path)}
    response = client.post("/v1/jobs", json=job_spec(keras={"data": data}))
    field_error(response, ["body", "keras", "data", "x"], "array 'x' is not in")


def test_npz_with_mismatched_sample_counts(client, tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.zeros((4, 2)), y=np.zeros(3))
    data = {"source": "npz", "path": str(path)}
    response = client.post("/v1/jobs", json=job_spec(keras={"data": data}))
    field_error(response, ["body", "keras", "data", "y"], "but x has 4 samples")


def test_malformed_json(client):
    response = client.post(
        "/v1/jobs", content=b'{"keras": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert "JSON decode error" in response.text


def test_oversized_body(client):
    response = client.post("/v1/jobs", json=job_spec(name="x", padding="y" * (1024 * 1024)))
    assert response.status_code == 413
    assert "larger than 1024 KiB" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/jobs/0", "/v1/jobs/-1", "/v1/jobs/abc", f"/v1/jobs/{2**70}"])
def test_bad_job_ids_are_422(client, path):
    assert client.get(path).status_code == 422


def test_unknown_job_is_404(client):
    for path in ("/v1/jobs/99", "/v1/jobs/99/logs", "/v1/jobs/99/metrics"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json() == {"detail": "job 99 not found"}
    assert client.post("/v1/jobs/99/cancel").status_code == 404


def test_bad_query_parameters(client):
    assert client.get("/v1/jobs?status=bogus").status_code == 422
    assert client.get("/v1/jobs?limit=0").status_code == 422
    response = client.get("/v1/jobs?cursor=zzz")
    field_error(response, ["query", "cursor"], "not one this server handed out")
