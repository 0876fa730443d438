"""deploy/gpuq.service: clean for `systemd-analyze verify`, hardened only where jobs cannot
notice, and its ExecStart line, with its environment, serves and stops on SIGTERM; beside it
deploy/gpuq-jobs.service, the cgroup jobs are fenced in on cgroup v2, clean too and bound so
that nothing done to gpuq reaches it.

systemd is not PID 1 here, so nothing starts the units: `systemd-analyze` checks them
offline against a root directory holding this box's unit files and the programs their
ExecStart lines name. That a v2 host's systemd then restarts gpuq while jobs run is not
tested here (tests/service/executors/fences/ move processes on a real, empty v2 hierarchy).
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from service.settings import known_variables
from service.team.state_dirs import HOME_MODE
from tests.e2e.server import Server

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNIT = DEPLOY / "gpuq.service"
JOBS_UNIT = DEPLOY / "gpuq-jobs.service"
ENV_EXAMPLE = DEPLOY / "gpuq.env"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
#: the console script of this test run's install, standing in for /opt/gpuq/bin/gpuq
GPUQ_SCRIPT = Path(sys.executable).parent / "gpuq"

#: `systemd-analyze security` names of the hardening the unit turns on.
HARDENED = (
    "ProtectKernelTunables=",
    "ProtectKernelLogs=",
    "ProtectHostname=",
    "RestrictRealtime=",
)
#: ... and of what it leaves off, because training would notice.
JOBS_NEED = {
    "ProtectHome=": "jobs read and write their owners' homes",
    "PrivateTmp=": "jobs share /tmp with their owners",
    "PrivateDevices=": "training needs /dev/nvidia*",
    "DeviceAllow=": "a device list hides /dev/nvidia* from training",
    "ProtectClock=": "documented to imply DeviceAllow=char-rtc, a device list",
    "ProtectKernelModules=": "CUDA runs nvidia-modprobe to load nvidia-uvm",
    "CapabilityBoundingSet=~CAP_SYS_MODULE": "CUDA runs nvidia-modprobe to load nvidia-uvm",
    "CapabilityBoundingSet=~CAP_SET(UID|GID|PCAP)": "gpuq starts each job as its owner",
    "NoNewPrivileges=": "setuid helpers (nvidia-modprobe, fusermount) must work in jobs",
    "RestrictSUIDSGID=": "jobs may make setgid shared folders",
    "MemoryDenyWriteExecute=": "XLA and CUDA compile code at run time",
    "SystemCallFilter=~@mount": "containers (apptainer, bwrap) run in jobs",
    "PrivateNetwork=": "jobs fetch data and talk to each other",
    "ProtectControlGroups=": "gpuq makes each job's cgroups in a subtree delegated to it",
}


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None or not SYSTEM_UNITS.is_dir():
        pytest.fail(
            "systemd-analyze or /usr/lib/systemd/system is missing: deploy/gpuq.service is "
            "checked with Debian's systemd package (`apt-get install systemd`; `make test` "
            "installs it)"
        )
    return found


def unit_settings(unit: Path = UNIT) -> dict[str, list[str]]:
    """The unit's `Section.Key` settings, each with its values in order."""
    settings: dict[str, list[str]] = defaultdict(list)
    section = ""
    for line in unit.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings[f"{section}.{key}"].append(value)
    return settings


def one(settings: dict[str, list[str]], key: str) -> str:
    (value,) = settings[key]
    return value


def exec_start(unit: Path = UNIT) -> list[str]:
    return shlex.split(one(unit_settings(unit), "Service.ExecStart"))


def unit_environment(state_root: Path) -> dict[str, str]:
    """The unit's Environment= lines, with `%S` (/var/lib for the system manager) at
    `state_root`."""
    env = {}
    for line in unit_settings()["Service.Environment"]:
        for assignment in shlex.split(line):
            name, _, value = assignment.partition("=")
            env[name] = value.replace("%S", str(state_root))
    return env


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root directory for `systemd-analyze --root`, which looks up every unit and the
    ExecStart binary under it: this box's unit files (sysinit.target, ...), both units, this
    test run's `gpuq` at the path gpuq.service names and this box's `sleep` at the path
    gpuq-jobs.service names."""
    systemd_analyze()
    made = tmp_path_factory.mktemp("root")
    shutil.copytree(SYSTEM_UNITS, made / "usr/lib/systemd/system", symlinks=True)
    (made / "etc/systemd/system").mkdir(parents=True)
    for unit in (UNIT, JOBS_UNIT):
        shutil.copy(unit, made / "etc/systemd/system" / unit.name)
    programs = {exec_start()[0]: GPUQ_SCRIPT, exec_start(JOBS_UNIT)[0]: shutil.which("sleep")}
    for path, program in programs.items():
        binary = made / path.lstrip("/")
        binary.parent.mkdir(parents=True, exist_ok=True)
        assert program is not None
        shutil.copy(program, binary)
    return made


def analyze(root: Path, *args: str, unit: Path = UNIT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [systemd_analyze(), *args, f"--root={root}", str(root / "etc/systemd/system" / unit.name)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("unit", [UNIT, JOBS_UNIT], ids=lambda unit: unit.name)
def test_verify_is_clean(root: Path, unit: Path) -> None:
    done = analyze(root, "verify", unit=unit)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_hardening_leaves_jobs_alone(root: Path) -> None:
    done = analyze(root, "security", "--offline=true", "--json=short")
    assert done.returncode == 0, done.stderr
    found = {check["name"]: check["set"] for check in json.loads(done.stdout)}
    assert {name: found.get(name) for name in HARDENED} == dict.fromkeys(HARDENED, True)
    in_effect = {name: why for name, why in JOBS_NEED.items() if found.get(name) is not False}
    assert not in_effect, f"hardening that breaks jobs (or unknown to systemd): {in_effect}"


def test_unit_keeps_jobs_and_state() -> None:
    settings = unit_settings()
    # A restart or stop of gpuq signals gpuq serve alone; training goes on and is re-adopted.
    assert one(settings, "Service.KillMode") == "process"
    assert one(settings, "Service.Restart") == "on-failure"
    # The kernel OOM-killing one job must not stop the service.
    assert one(settings, "Service.OOMPolicy") == "continue"
    # Delegated though gpuq turns no controller on in it (on v1, else systemd would move the
    # unit's processes, jobs included, back into its own cgroups).
    assert one(settings, "Service.Delegate") == "yes"
    assert one(settings, "Service.ProtectSystem") == "full"  # strict: data folders read-only
    assert one(settings, "Service.StateDirectory") == "gpuq"
    # systemd and gpuq agree on the state directory's mode: members pass through to the
    # socket and to their run directories.
    assert int(one(settings, "Service.StateDirectoryMode"), 8) == HOME_MODE
    assert unit_environment(Path("/var/lib"))["GPUQ_HOME"] == "/var/lib/gpuq"


def test_jobs_are_fenced_in_a_companion_unit_that_gpuq_never_stops() -> None:
    gpuq, jobs = unit_settings(), unit_settings(JOBS_UNIT)
    # gpuq.service starts it first, and nothing done to gpuq reaches it: no Requires=,
    # BindsTo= or PartOf= either way, nor any other setting naming the other unit.
    for key in ("Unit.Wants", "Unit.After"):
        assert JOBS_UNIT.name in " ".join(gpuq[key]).split(), key
    naming = {key for key, values in gpuq.items() if any(JOBS_UNIT.name in v for v in values)}
    assert naming == {"Unit.Wants", "Unit.After", "Service.Environment"}
    assert not [key for key, values in jobs.items() if any(UNIT.name in v for v in values)]
    # On cgroup v2 gpuq fences jobs in its cgroup: system.slice, the default slice.
    assert "Service.Slice" not in jobs
    fence_cgroup = unit_environment(Path("/var/lib"))["GPUQ_FENCE_CGROUP"]
    assert fence_cgroup == f"/sys/fs/cgroup/system.slice/{JOBS_UNIT.name}"
    # Its one process never needs restarting, and a stop of it leaves jobs running.
    assert exec_start(JOBS_UNIT) == ["/bin/sleep", "infinity"]
    assert one(jobs, "Service.Type") == "exec"
    assert one(jobs, "Service.KillMode") == one(gpuq, "Service.KillMode") == "process"
    assert "Service.Restart" not in jobs
    assert not [key for key in jobs if key.startswith("Install.")]  # gpuq.service starts it
    # Delegated to gpuq, with jobs' memory and threads counted as gpuq.service counts them.
    assert one(jobs, "Service.Delegate") == "yes"
    for key in ("Service.OOMPolicy", "Service.MemoryAccounting", "Service.TasksMax"):
        assert one(jobs, key) == one(gpuq, key), key


def test_env_example_names_only_settings() -> None:
    named = re.findall(r"^#?(GPUQ_\w+)=", ENV_EXAMPLE.read_text(), flags=re.MULTILINE)
    assert named
    assert set(named) <= known_variables()


def test_exec_start_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    argv = exec_start()
    # The installed script is `service.cli.main:main`, which Server runs.
    assert argv[:2] == ["/opt/gpuq/bin/gpuq", "serve"]
    state_root = tmp_path / "var-lib"  # %S
    state_root.mkdir()
    env = unit_environment(state_root)
    server = Server(Path(env["GPUQ_HOME"]))
    # A systemd service's bare environment, with what a site's /etc/gpuq/gpuq.env would add
    # on a box without GPUs.
    server.env = {
        "PATH": os.environ["PATH"],
        **env,
        "GPUQ_GPUS": "sim:2x8GiB",
        "GPUQ_HOST": "127.0.0.1",
        "GPUQ_PORT": str(server.port),
        "GPUQ_WARM_WORKERS": "0",
    }
    log = state_root / "serve.log"
    try:
        try:
            server.start(*argv[2:])
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{log.read_text()}") from exc
        health = httpx.get(f"{server.url}/healthz").json()
        assert (health["scheduler"], health["gpus"]) == ("running", 2)
        socket = server.home / "gpuq.sock"
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket))) as local:
            assert local.get("http://gpuq/healthz").status_code == 200
        assert server.home.stat().st_mode & 0o777 == int(
            one(unit_settings(), "Service.StateDirectoryMode"), 8
        )
        began = time.monotonic()
        server.kill(signal.SIGTERM)
        stopped_s = time.monotonic() - began
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
    output = log.read_text()
    assert "GPUQ_RUN_AS=owner" in output, output
    assert "UNKNOWN SETTING" not in output, output
    # A clean stop (the service closed, exit 0), so Restart=on-failure does not restart it.
    assert server.proc.returncode == 0, output
    timeout_s = float(one(unit_settings(), "Service.TimeoutStopSec").removesuffix("s"))
    assert stopped_s < timeout_s
