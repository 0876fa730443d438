"""The box as NVML reports it: the driver, each GPU's identity, modes and processes."""

from typing import Any

from service.doctor.processes import facts
from service.doctor.report import Check, Report
from service.gpus.nvml import DeviceReading, GpuFacts, GpuProbe


def nvml_checks(report: Report, nvml: GpuProbe, readings: list[DeviceReading]) -> None:
    driver = nvml.facts()
    report.driver = {"driver_version": driver.driver_version, "cuda_version": driver.cuda_version}
    report.checks.append(
        Check.ok(
            "NVML",
            f"driver {driver.driver_version}, CUDA {driver.cuda_version}, {len(readings)} GPUs",
        )
    )
    modes = {g.index: g for g in driver.gpus}
    for reading in readings:
        gpu = modes.get(reading.index, GpuFacts(reading.index, "Default", None))
        processes = [facts(p.pid, p.memory_mb) for p in reading.processes]
        report.gpus.append(_gpu_json(reading, gpu, processes))
        report.checks.append(_gpu_check(reading, gpu))
        listed = "; ".join(p.describe() for p in processes) or "none"
        report.checks.append(Check.ok(f"GPU {reading.index} processes", listed))


def _gpu_check(reading: DeviceReading, gpu: GpuFacts) -> Check:
    name = f"GPU {reading.index}"
    mig = {True: "MIG on", False: "MIG off", None: "no MIG"}[gpu.mig]
    detail = (
        f"{reading.name}, {reading.uuid}, {reading.memory_total_mb} MiB, "
        f"compute mode {gpu.compute_mode}, {mig}"
    )
    if gpu.mig:
        return Check.fail(
            name,
            detail,
            f"gpuq places whole GPUs, not MIG instances: nvidia-smi -i {reading.index} -mig 0",
        )
    if gpu.compute_mode != "Default":
        return Check.fail(
            name,
            detail,
            "jobs that share a GPU need the Default compute mode: "
            f"nvidia-smi -i {reading.index} -c DEFAULT",
        )
    return Check.ok(name, detail)


def _gpu_json(reading: DeviceReading, gpu: GpuFacts, processes: list[Any]) -> dict[str, Any]:
    return {
        "index": reading.index,
        "uuid": reading.uuid,
        "name": reading.name,
        "memory_total_mb": reading.memory_total_mb,
        "memory_used_mb": reading.memory_used_mb,
        "compute_mode": gpu.compute_mode,
        "mig": gpu.mig,
        "processes": [
            {
                "pid": p.pid,
                "memory_mb": p.memory_mb,
                "user": p.user,
                "command": p.command,
                "job_id": p.job_id,
                "foreign": p.job_id is None,
            }
            for p in processes
        ],
    }
