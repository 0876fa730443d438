"""gpuq touches what lies in a job's folder only through `gpuq.contract.job_files`.

Read from the source: a call in `service` (gpuq's side, which may be root) that opens,
stats, lists, reads, writes, connects to or changes a path in an attempt's folder by name
(`run.log`, `run.path / ...`, `executor.run_dir(...).exit`) is a way round the door. The
one module allowed is `prepare`, which writes an attempt's folder while it is still gpuq's,
before it is given to the job's owner.
"""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALLOWED = {"service/executors/prepare.py"}
#: what a call does to a path that makes it a way in
PATH_METHODS = {
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "stat", "lstat", "exists",
    "is_file", "is_dir", "is_symlink", "is_socket", "is_fifo", "iterdir", "glob", "rglob",
    "resolve", "touch", "unlink", "chmod", "rename", "replace", "mkdir", "rmdir", "readlink",
}  # fmt: skip
FUNCTIONS = {
    "open", "os.open", "os.stat", "os.lstat", "os.scandir", "os.listdir", "os.walk",
    "os.chmod", "os.chown", "os.unlink", "os.rename", "os.replace", "os.readlink",
    "os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.getsize",
}  # fmt: skip
#: a name in an attempt's folder: `run.log`, `job.run.exit`, `run_dir(7, 1).events`,
#: `run.path / "x"`
IN_THE_FOLDER = re.compile(
    r"\brun(_dir\(.*?\))?\.(log|events|exit|runner|spec|launch|heartbeat|checkpoints"
    r"|artifacts|tensorboard|terminal)\b|\brun(_dir\(.*?\))?\.path\s*/"
)


def ways_round(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        called = ast.unparse(node.func)
        if called in FUNCTIONS or called.startswith("shutil."):
            touched = [ast.unparse(a) for a in node.args]
        elif isinstance(node.func, ast.Attribute) and node.func.attr in PATH_METHODS:
            touched = [ast.unparse(node.func.value)]
        else:
            continue
        if any(IN_THE_FOLDER.search(t) for t in touched):
            found.append((node.lineno, ast.unparse(node)))
    return [f"line {line}: {call}" for line, call in sorted(found)]


def test_gpuqs_side_reaches_a_jobs_folder_only_through_the_door():
    found = {}
    for path in sorted((REPO / "service").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name not in ALLOWED and (ways := ways_round(path.read_text())):
            found[name] = ways
    assert found == {}


def test_the_check_sees_the_ways_round_it_knows():
    ways = ways_round(
        "run.log.read_text()\n"
        "open(job.run.exit)\n"
        "(run.path / 'artifacts').iterdir()\n"
        "os.lstat(running.run.events)\n"
        "self.run_dir(1, 2).runner.exists()\n"
        "shutil.copy(run.checkpoints, x)\n"
        "job_files.open_file(run.path, run.log.name)\n"  # the door: fine
        "job.spec.get('kind')\n"
    )
    assert [w.split(": ")[0] for w in ways] == [f"line {n}" for n in range(1, 7)]
