import logging

import pytest

from service.gpus import inventory as inventory_module
from service.gpus.inventory import InventoryError, discover, parse_sim
from service.gpus.nvml import NvmlUnavailable
from tests.fakes import FakeNvml


class NoDriver:
    """Hardware stand-in: NVML cannot load, as on a host without an NVIDIA driver."""

    def __init__(self) -> None:
        raise NvmlUnavailable("NVML is not usable here: NVML Shared Library Not Found")


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(inventory_module, "NvmlProbe", NoDriver)


def test_sim_count_and_memory():
    gpus = parse_sim("sim:4x16GiB")
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert {g.memory_total_mb for g in gpus} == {16384}
    assert parse_sim("sim:1x8000")[0].memory_total_mb == 8000
    assert len({g.uuid for g in parse_sim("sim:3")}) == 3


@pytest.mark.parametrize("value", ["sim:0", "sim:x", "sim:2x10", "bogus", "sim:99"])
def test_bad_settings_are_explained(value):
    with pytest.raises(InventoryError, match="GPUQ_GPUS"):
        discover(value)


def test_nvml_without_a_driver_fails_fast(no_driver):
    with pytest.raises(InventoryError, match="GPUQ_GPUS=nvml but NVML"):
        discover("nvml")


def test_auto_falls_back_to_simulated_gpus_loudly(no_driver, caplog):
    with caplog.at_level(logging.WARNING):
        inventory = discover("auto")
    assert inventory.simulated and len(inventory.devices) == 2
    assert "NO NVIDIA GPU FOUND" in caplog.text


@pytest.mark.parametrize("setting", ["auto", "nvml"])
def test_real_gpus_are_used_when_nvml_finds_them(monkeypatch, setting):
    fake = FakeNvml(count=2, memory_mb=24564, topology={(0, 1): 0})
    monkeypatch.setattr(inventory_module, "NvmlProbe", lambda: fake)
    inventory = discover(setting)
    assert not inventory.simulated
    assert [(g.index, g.uuid, g.memory_total_mb) for g in inventory.devices] == [
        (0, "GPU-fake-0", 24564),
        (1, "GPU-fake-1", 24564),
    ]
    assert inventory.topology == {(0, 1): 0}
