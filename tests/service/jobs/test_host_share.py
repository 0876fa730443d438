"""The cores and host memory a job gets at submit: its spec's, else the site's defaults
for what it holds of the box's GPUs, cut to the box."""

import pytest

from gpuq.contract.spec import JobSpec, Resources
from service.errors import Invalid
from service.executors import Node
from service.gpus.inventory import Inventory, parse_sim
from service.host import HostSize
from service.jobs.host_share import HostShare, ShareDefaults, resolve_share
from service.runtime.checks import SubmitChecks
from tests.conftest import ANA, command_spec

BOX = HostSize(cpus=30, memory_mb=120_000, total_cpus=32, total_memory_mb=128_000)
#: 80 GiB GPUs, 8 cores and 32 GiB per GPU, 2 cores and 4 GiB for a job with none
SITE = ShareDefaults(
    cpus_per_gpu=8,
    host_memory_per_gpu_mb=32768,
    cpus=2,
    host_memory_mb=4096,
    largest_gpu_mb=81920,
    box=BOX,
)


@pytest.mark.parametrize(
    ("resources", "share"),
    [
        ({"gpus": 1}, HostShare(8, 32768)),
        ({"gpus": 3}, HostShare(24, 98304)),
        ({"gpu_ids": [0, 2]}, HostShare(16, 65536)),
        ({"gpus": 1, "memory_mb": 20480}, HostShare(2, 8192)),  # a quarter of the GPU
        ({"gpus": 1, "memory_mb": 10001}, HostShare(0.98, 4001)),  # 0.9767, 4000.4: up
        ({"gpus": 1, "memory_mb": 800}, HostShare(0.1, 320)),  # never under 0.1 core
        ({"gpus": 2, "memory_mb": 81920}, HostShare(16, 65536)),  # all of a GPU is a whole
        ({"gpus": 0}, HostShare(2, 4096)),
        ({"gpus": 4}, HostShare(30, 120_000)),  # 32 cores, 128 GiB: cut to the box
        ({"gpus": 4, "cpus": 31, "host_memory_mb": 200_000}, HostShare(31, 200_000)),
        ({"gpus": 1, "cpus": 0.5}, HostShare(0.5, 32768)),
        ({"gpus": 0, "host_memory_mb": 16}, HostShare(2, 16)),
    ],
)
def test_the_spec_wins_else_the_default_for_what_the_job_holds(resources, share):
    assert resolve_share(Resources.model_validate(resources), SITE) == share


def test_with_no_defaults_a_job_gets_what_it_names_alone():
    assert resolve_share(Resources(gpus=2), ShareDefaults(box=BOX)) == HostShare(None, None)
    named = Resources(gpus=0, cpus=3)
    assert resolve_share(named, ShareDefaults()) == HostShare(3, None)


def test_without_the_boxs_gpus_or_size_a_shared_gpu_counts_whole_and_nothing_is_cut():
    slurm = ShareDefaults(cpus_per_gpu=8, host_memory_per_gpu_mb=32768)  # no GPUs, no box
    assert resolve_share(Resources(gpus=8, memory_mb=20480), slurm) == HostShare(64, 262144)


class _Partition:
    """A Slurm partition of one node with 8 GPUs, as the API lists it."""

    def nodes(self) -> list[Node]:
        return [Node("n1", gpus=8, gpus_allocated=0, gpus_free=8, state="idle")]


def test_the_box_bounds_requests_and_defaults_here_but_not_under_slurm(settings, db):
    small = settings.model_copy(
        update={"host_cpus": 4, "host_memory_mb": 8192, "default_cpus_per_gpu": 8}
    )
    asked = JobSpec.model_validate(command_spec("pass", gpus=1, cpus=6))
    box = Inventory(parse_sim("sim:2x8GiB"), simulated=True, probe=None)
    here = SubmitChecks(small, db, box, cluster=None)
    with pytest.raises(Invalid, match="6 cores requested but this box gives jobs 4"):
        here.check(asked, ANA)
    assert resolve_share(Resources(gpus=1), here.share_defaults) == HostShare(4, None)
    slurm = SubmitChecks(small, db, Inventory([], simulated=False, probe=None), _Partition())
    slurm.check(asked, ANA)  # the node's size is Slurm's to judge
    assert resolve_share(Resources(gpus=1), slurm.share_defaults) == HostShare(8, None)
