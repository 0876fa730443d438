import pytest
from pydantic import ValidationError

from gpuq.contract.spec import JobSpec
from tests.conftest import job_spec


def error_locs(spec: dict) -> list[tuple]:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(spec)
    return [e["loc"] for e in info.value.errors()]


def test_defaults_fill_a_minimal_spec():
    spec = JobSpec.model_validate(
        {"keras": {"model": {"builtin": "mlp"}, "data": {"source": "synthetic"}}}
    )
    assert spec.resources.gpu_count == 1
    assert spec.resources.memory_mb is None
    assert spec.keras.epochs == 1


def test_unknown_field_is_named():
    assert ("keras", "epoch") in error_locs(job_spec(keras={"epoch": 3}))


def test_missing_model_is_named():
    spec = job_spec()
    del spec["keras"]["model"]
    assert ("keras", "model") in error_locs(spec)


def test_wrong_type_is_named():
    assert ("keras", "batch_size") in error_locs(job_spec(keras={"batch_size": "big"}))


def test_data_source_selects_its_fields():
    locs = error_locs(job_spec(keras={"data": {"source": "npz"}}))
    assert ("keras", "data", "npz", "path") in locs


def test_gpus_and_gpu_ids_must_agree():
    locs = error_locs(job_spec(resources={"gpus": 2, "gpu_ids": [0]}))
    assert ("resources",) in locs


def test_repeated_gpu_ids_are_refused():
    assert ("resources",) in error_locs(job_spec(resources={"gpu_ids": [1, 1]}))


def test_huge_numbers_are_bounded():
    assert ("priority",) in error_locs(job_spec(priority=10**30))
    assert ("keras", "epochs") in error_locs(job_spec(keras={"epochs": 10**12}))


def test_retries_are_bounded():
    assert ("max_retries",) in error_locs(job_spec(max_retries=11))
    assert JobSpec.model_validate(job_spec(max_retries=2)).max_retries == 2


def test_sparse_classification_needs_one_output_per_class():
    spec = job_spec(
        keras={
            "data": {"source": "synthetic", "task": "classification", "classes": 3},
            "loss": "sparse_categorical_crossentropy",
        }
    )
    assert ("keras",) in error_locs(spec)


def error_messages(spec: dict) -> str:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(spec)
    return str(info.value)


def test_a_model_needs_builtin_or_keras_json():
    assert "model needs `builtin` (mlp or cnn) or `keras_json`" in error_messages(
        job_spec(keras={"model": {"hidden_units": [4]}})
    )


def test_cnn_needs_image_data():
    assert "the cnn model needs image data" in error_messages(
        job_spec(keras={"model": {"builtin": "cnn"}})
    )
    images = {"source": "synthetic", "image_shape": [8, 8, 1]}
    assert JobSpec.model_validate(job_spec(keras={"model": {"builtin": "cnn"}, "data": images}))


def test_keras_json_with_a_lambda_is_refused():
    text = '{"class_name": "Sequential", "config": {"layers": [{"class_name": "Lambda"}]}}'
    assert "Lambda layers carry Python code" in error_messages(
        job_spec(keras={"model": {"keras_json": text}})
    )


def test_virtual_gpus_need_fixed_caps():
    spec = job_spec(resources={"gpus": 1, "replicas_per_gpu": 2, "memory_growth": True})
    assert "replicas_per_gpu needs fixed memory caps" in error_messages(spec)


def test_a_command_job_needs_its_section_and_no_other():
    assert "kind 'command' needs a `command` section" in error_messages(
        {"kind": "command", "resources": {"gpus": 0}}
    )


def test_keras_jobs_may_be_preempted_unless_they_say_no_and_commands_only_if_they_say_yes():
    keras = {"keras": {"model": {"builtin": "mlp"}, "data": {"source": "synthetic"}}}
    command = {"kind": "command", "command": {"argv": ["python", "train.py"]}}
    assert JobSpec.model_validate(keras).may_be_preempted
    assert not JobSpec.model_validate({**keras, "preemptible": False}).may_be_preempted
    assert not JobSpec.model_validate(command).may_be_preempted
    assert JobSpec.model_validate({**command, "preemptible": True}).may_be_preempted
    session = {**command, "kind": "session"}
    assert not JobSpec.model_validate(session).may_be_preempted
    with pytest.raises(ValidationError, match="a session is never preempted"):
        JobSpec.model_validate({**session, "preemptible": True})


def test_nodes_multiply_the_gpus_and_take_no_gpu_ids():
    spec = JobSpec.model_validate(job_spec(resources={"gpus": 2, "nodes": 3}))
    assert (spec.resources.gpu_count, spec.resources.total_gpus) == (2, 6)
    assert ("resources",) in error_locs(job_spec(resources={"gpu_ids": [0], "nodes": 2}))
    assert ("resources", "nodes") in error_locs(job_spec(resources={"nodes": 0}))
