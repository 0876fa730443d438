"""A throwaway Docker daemon for the container tests, and a Debian base image for it.

The daemon is Debian's `dockerd` with its data, its containerd and its socket under one
temporary folder. It makes no bridge and no firewall rules: builds and containers use the
host's network (`--network host`), and what they serve listens on loopback only. No
registry is reachable from the test machine, so the base image is built from Debian's
packages (`debootstrap`, then `docker import`), standing in for the official Python image.
"""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

#: What a stand-in for `python:3.11-slim` needs: Python and its venv module.
BASE_PACKAGES = ("python3", "python3-venv")
MIRROR = "http://deb.debian.org/debian"

Done = subprocess.CompletedProcess[str]


def command(name: str) -> str:
    """The full path of a program from Debian's packages (`make test` installs them)."""
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    assert found, f"{name} is missing: `make test` installs docker.io and debootstrap"
    return found


class DockerDaemon:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.socket}"}
        # Debian's client, which matches its daemon (another `docker` may be first on PATH)
        debian = Path("/usr/bin/docker")
        self.client = str(debian) if debian.exists() else command("docker")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> None:
        self.proc = subprocess.Popen(
            [
                command("dockerd"),
                f"--data-root={self.root / 'data'}",
                f"--exec-root={self.root / 'exec'}",
                f"--pidfile={self.root / 'dockerd.pid'}",
                f"--host=unix://{self.socket}",
                "--storage-driver=overlay2",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
            ],
            stdout=(self.root / "dockerd.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"dockerd exited:\n{self.log()}"
            if self.run("version", check=False, timeout=10).returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"dockerd did not answer within {timeout_s} s:\n{self.log()}")

    def stop(self) -> None:
        """Removes every container, then stops the daemon (it unmounts its layers)."""
        if self.proc is None:
            return
        ids = self.run("ps", "-aq", check=False).stdout.split()
        if ids:
            self.run("rm", "-f", *ids, check=False, timeout=120)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self._unmount()

    def _unmount(self) -> None:
        """What the daemon left mounted under its folder (its network namespace's
        bind mount stays after it exits), so that the folder can be removed."""
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(f"{self.root}/")), reverse=True):
            subprocess.run(["umount", "--lazy", point], check=False, timeout=30)

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> "Done":
        done = subprocess.run(
            [self.client, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert done.returncode == 0, f"docker {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done

    def log(self) -> str:
        return (self.root / "dockerd.log").read_text(errors="replace")[-4000:]

    def import_debian(self, tag: str, rootfs: Path, timeout_s: float = 900) -> None:
        """A minimal Debian of this host's release with `BASE_PACKAGES`, as image `tag`."""
        codename = _os_release()["VERSION_CODENAME"]
        include = "--include=" + ",".join(BASE_PACKAGES)
        boot = subprocess.run(
            [command("debootstrap"), "--variant=minbase", include, codename, str(rootfs), MIRROR],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        assert boot.returncode == 0, f"debootstrap failed:\n{boot.stdout[-3000:]}{boot.stderr}"
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        done = subprocess.run(
            [self.client, "import", "-", tag],
            env=self.env,
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            timeout=300,
        )
        tar.stdout.close()
        assert tar.wait() == 0 and done.returncode == 0, f"docker import failed: {done.stderr}"


def _os_release() -> dict[str, str]:
    lines = Path("/etc/os-release").read_text().splitlines()
    return {k: v.strip('"') for k, _, v in (line.partition("=") for line in lines) if v}
