"""The box's size for jobs: as detected or as the settings give it, less gpuq's reserve."""

import os

from service.host import HostSize, detected_memory_mb, host_size
from service.settings import Settings


def test_the_settings_size_the_box_and_the_reserve_is_never_handed_out(tmp_path):
    settings = Settings(
        home=tmp_path, host_cpus=16, host_memory_mb=65536, reserved_cpus=1.5,
        reserved_host_memory_mb=4096,
    )  # fmt: skip
    assert host_size(settings) == HostSize(
        cpus=14.5, memory_mb=61440, total_cpus=16, total_memory_mb=65536
    )
    kept_all = settings.model_copy(update={"reserved_cpus": 20, "reserved_host_memory_mb": 10**6})
    assert (host_size(kept_all).cpus, host_size(kept_all).memory_mb) == (0, 0)


def test_unset_the_box_is_what_this_process_may_run_on_and_the_kernels_memtotal(tmp_path):
    box = host_size(Settings(home=tmp_path))
    assert box.total_cpus == len(os.sched_getaffinity(0))
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert abs(box.total_memory_mb - pages) <= 1
    assert box.memory_mb == box.total_memory_mb - 1024  # GPUQ_RESERVED_HOST_MEMORY_MB


def test_memtotal_is_read_in_mib(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemFree:  1000 kB\nMemTotal:       32768000 kB\n")
    assert detected_memory_mb(meminfo) == 32000
