from pathlib import Path

import pytest

from service.settings import Settings


def test_defaults_match_the_design(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("GPUQ_HOME", "GPUQ_DATABASE_URL", "GPUQ_GPUS", "GPUQ_HOST", "GPUQ_PORT"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert (settings.gpus, settings.host, settings.port) == ("auto", "127.0.0.1", 8000)
    assert settings.home == tmp_path / ".gpuq"
    assert settings.db_url == f"sqlite:///{tmp_path / '.gpuq' / 'gpuq.db'}"
    assert settings.cancel_grace_s == 30


def test_a_relative_home_is_made_absolute(monkeypatch, tmp_path):
    """Workers run in their run directory, so a relative state path would point elsewhere."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUQ_HOME", "state")
    assert Settings().home == tmp_path / "state"
    assert Settings().runs_dir.is_absolute()


def test_database_url_overrides_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUQ_DATABASE_URL", f"sqlite:///{tmp_path}/other.db")
    assert Settings().db_url == f"sqlite:///{tmp_path}/other.db"


@pytest.mark.parametrize("value", ["-1", "abc"])
def test_bad_values_are_refused(monkeypatch, value):
    monkeypatch.setenv("GPUQ_CANCEL_GRACE_S", value)
    with pytest.raises(ValueError, match="cancel_grace_s"):
        Settings()


def test_home_is_a_path():
    assert isinstance(Settings(home="x").home, Path)


def test_unknown_variables_are_named_with_the_nearest_known_one():
    from service.settings import unknown_variables

    environ = {
        "GPUQ_EXCUTOR": "slurm",
        "GPUQ_SLURM_PARITION": "gpu",
        "GPUQ_EXECUTOR": "local",
        "GPUQ_URL": "http://127.0.0.1:8000",
        "GPUQ_TOKEN": "t",
        "GPUQ_ZZZZZZZZZZZZZZZZZZ": "1",
        "HOME": "/root",
    }
    assert unknown_variables(environ) == [
        ("GPUQ_EXCUTOR", "GPUQ_EXECUTOR"),
        ("GPUQ_SLURM_PARITION", "GPUQ_SLURM_PARTITION"),
        ("GPUQ_ZZZZZZZZZZZZZZZZZZ", None),
    ]


def test_every_setting_and_the_clients_variables_are_known():
    from service.settings import known_variables

    known = known_variables()
    assert {"GPUQ_EXECUTOR", "GPUQ_SLURM_PYTHON", "GPUQ_CANCEL_GRACE_S"} <= known
    assert {"GPUQ_URL", "GPUQ_TOKEN", "GPUQ_RUN_DIR"} <= known
