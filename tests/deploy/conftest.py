"""What installing gpuq needs, fetched once: a folder of wheels (`wheelhouse`) from which
gpuq builds and installs with `pip --no-index`, as on a host without an index."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The extras the wheelhouse holds: TensorFlow for the CPU (CI, laptops) and PostgreSQL's
#: driver. `gpu` (tensorflow[and-cuda], gigabytes of CUDA) is left to GPU hosts.
EXTRAS = ("cpu", "postgres")


def requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """gpuq's pinned dependencies with `EXTRAS`, and its build backend."""
    config = tomllib.loads(pyproject.read_text())
    project = config["project"]
    extras = [r for extra in EXTRAS for r in project["optional-dependencies"][extra]]
    return [*project["dependencies"], *extras, *config["build-system"]["requires"]]


@pytest.fixture(scope="session")
def wheelhouse(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a wheel of every package gpuq's `requirements()` need, for this
    interpreter: `pip install --no-index --find-links WHEELHOUSE ...` installs from it.

    It lives in pytest's cache (`.pytest_cache`), so only the first run downloads (about
    300 MB, from the configured index); later runs check it offline and download only what
    a changed pin needs."""
    cache = getattr(request.config, "cache", None)  # None under `-p no:cacheprovider`
    folder = cache.mkdir("wheelhouse") if cache else tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(folder)]
    pip += ["--only-binary=:all:", *requirements()]
    offline = subprocess.run(
        [*pip, "--no-index", "--find-links", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if offline.returncode != 0:
        online = subprocess.run(pip, capture_output=True, text=True, timeout=1800)
        assert online.returncode == 0, f"pip download failed:\n{online.stdout}{online.stderr}"
    return folder
