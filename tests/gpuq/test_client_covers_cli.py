"""The Python client covers every route the CLI uses (issue 52): both sides' (method, path)
pairs, read from their syntax trees, and a few of the client's methods against the API."""

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuq import http
from gpuq.client import Drain, Gpuq, Sweep
from tests.conftest import command_spec
from tests.e2e.server import Server

ROOT = Path(__file__).resolve().parents[2]
CLI = sorted((ROOT / "service" / "cli").glob("*.py"))
CLIENT = ROOT / "gpuq" / "client.py"
VERBS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
#: `gpuq.http.Client`'s methods by what their arguments say of the route: (verb, path, ...),
#: (path, ...) to GET, a route of their own, or none
VERB_AND_PATH = {"request", "json"}
PATH_TO_GET = {"stream", "download"}
OWN_ROUTE = {"changes": ("GET", "/v1/jobs/{}"), "terminal": ("WEBSOCKET", "/v1/jobs/{}/terminal")}
NO_ROUTE = {"close"}
#: an f-string's part that the collector cannot tell
ANY = "{}"

Route = tuple[str, str]


class _Calls(ast.NodeVisitor):
    """The routes of calls in one module; `values` are the string constants each function's
    parameters are called with (`"job"` and `"sweep"` for `cancel_saying_so`'s `what`)."""

    def __init__(self, where: str, values: dict[tuple[str, str], set[str]]) -> None:
        self.where, self.values = where, values
        self.scopes: list[ast.FunctionDef] = []
        self.found: dict[Route, str] = {}
        self.unresolved: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scopes.append(node)
        self.generic_visit(node)
        self.scopes.pop()

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        verb = node.args[0] if node.args else None
        routes: list[Route] = []
        if isinstance(verb, ast.Constant) and verb.value in VERBS and len(node.args) > 1:
            routes = [(verb.value, p) for p in self.paths(node.args[1])]
        elif name in VERB_AND_PATH and node.args:
            self.unresolved.append(f"{self.where}:{node.lineno}")
        elif name in PATH_TO_GET and node.args:
            routes = [("GET", p) for p in self.paths(node.args[0])]
        elif name in OWN_ROUTE:
            routes = [OWN_ROUTE[name]]
        for route in routes:
            if route[1].startswith("/v1"):
                self.found.setdefault(route, f"{self.where}:{node.lineno}")
            else:
                self.unresolved.append(f"{self.where}:{node.lineno}")
        self.generic_visit(node)

    def paths(self, node: ast.expr) -> list[str]:
        """Every string `node` can be, an unknown part as `{}`."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            texts = [""]
            for part in node.values:
                value = part.value if isinstance(part, ast.FormattedValue) else part
                texts = [t + p for t in texts for p in self.paths(value)]
            return texts
        if isinstance(node, ast.Name):
            return self.named(node.id)
        return [ANY]

    def named(self, name: str) -> list[str]:
        for scope in reversed(self.scopes):
            assigned = [
                a.value
                for a in ast.walk(scope)
                if isinstance(a, ast.Assign) and [ast.unparse(t) for t in a.targets] == [name]
            ]
            if assigned:
                return [p for value in assigned for p in self.paths(value)]
            if name in _parameters(scope):
                return sorted(self.values.get((scope.name, name), {ANY}))
        return [ANY]


def _parameters(function: ast.FunctionDef) -> list[str]:
    return [a.arg for a in [*function.args.args, *function.args.kwonlyargs]]


def parameter_values(trees: list[ast.Module]) -> dict[tuple[str, str], set[str]]:
    """(function, parameter) -> the strings it is called with; `{}` once anything else."""
    functions = {f.name: f for t in trees for f in ast.walk(t) if isinstance(f, ast.FunctionDef)}
    values: dict[tuple[str, str], set[str]] = {}
    for call in (c for t in trees for c in ast.walk(t) if isinstance(c, ast.Call)):
        func = call.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called not in functions:
            continue
        function = functions[called]
        names = _parameters(function)
        given = dict(zip(names, call.args, strict=False))
        given |= {k.arg: k.value for k in call.keywords if k.arg}
        defaults = dict(zip(names[::-1], function.args.defaults[::-1], strict=False))
        for name in names:
            value = given.get(name, defaults.get(name))
            text = value.value if isinstance(value, ast.Constant) else None
            values.setdefault((called, name), set()).add(text if isinstance(text, str) else ANY)
    return values


def routes(files: list[Path]) -> tuple[dict[Route, str], list[str]]:
    """The routes `files` call, each with where first, and the calls whose route is not
    known (a verb or path the collector cannot read)."""
    trees = [ast.parse(f.read_text()) for f in files]
    values = parameter_values(trees)
    found: dict[Route, str] = {}
    unresolved: list[str] = []
    for path, tree in zip(files, trees, strict=True):
        calls = _Calls(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), values)
        calls.visit(tree)
        found = calls.found | found
        unresolved += calls.unresolved
    return found, unresolved


def missing_from(client: Path) -> dict[Route, str]:
    """The CLI's routes that `client` has no call of, with where the CLI calls them."""
    cli, _ = routes(CLI)
    covered, _ = routes([client])
    return {route: where for route, where in sorted(cli.items()) if route not in covered}


def test_every_route_of_the_cli_has_a_client_method():
    assert missing_from(CLIENT) == {}


def test_the_collector_reads_every_call_of_the_cli():
    cli, unresolved = routes(CLI)
    assert unresolved == [], "calls whose route the collector cannot read"
    # the routes it must see, reached through a variable, a parameter or a helper
    assert {
        ("GET", "/v1/jobs/{}/logs"),
        ("GET", "/v1/jobs/{}/artifacts/{}"),
        ("POST", "/v1/sweeps/{}/hold"),
        ("POST", "/v1/sweeps/{}/cancel"),
        ("POST", "/v1/jobs/{}/cancel"),
        ("WEBSOCKET", "/v1/jobs/{}/terminal"),
    } <= cli.keys()
    assert not any(ANY in path.split("/")[:3] for _, path in cli), "a placeholder kind"


def test_every_method_of_the_http_client_is_known_to_the_collector():
    methods = {
        name
        for name, _ in inspect.getmembers(http.Client, inspect.isfunction)
        if not name.startswith("_")
    }
    assert methods == VERB_AND_PATH | PATH_TO_GET | OWN_ROUTE.keys() | NO_ROUTE


def test_a_cli_route_the_client_lacks_is_found(tmp_path):
    thinner = tmp_path / "client.py"
    thinner.write_text(CLIENT.read_text().replace('f"/v1/sweeps/{sweep_id}/hold"', '"/nope"'))
    assert list(missing_from(thinner)) == [("POST", "/v1/sweeps/{}/hold")]


@pytest.fixture
def gq(api: TestClient) -> Iterator[Gpuq]:
    yield Gpuq(http=http.Client(http=api))


def _sweep_spec() -> dict[str, Any]:
    spec = command_spec("pass", gpus=1)
    spec["sweep"] = {"parameters": {"lr": [0.1, 0.2]}}
    return spec


def test_sweeps_admin_usage_and_webhook_against_the_api(gq):
    made = gq.submit_sweep(_sweep_spec())
    assert [s.id for s in gq.sweeps()] == [made.id]
    held = gq.hold_sweep(made.id)
    assert isinstance(held, Sweep) and held.held is True
    assert gq.release_sweep(made.id).held is False
    assert [g["index"] for g in gq.gpus()] == [0, 1]
    [drain] = gq.drain([1], reason="new fan")
    assert isinstance(drain, Drain) and (drain.gpu, drain.reason) == (1, "new fan")
    assert gq.drains() == [drain]
    assert gq.resume() == []
    assert gq.usage(since="1d")["by"] == "owner"
    assert gq.usage(by="gpu")["rows"][0]["gpu"] == 0
    assert "submit" in {e["action"] for e in gq.audit(limit=5)["entries"]}
    first = gq.webhook()
    assert first.url is None and first.secret
    assert gq.set_webhook("https://example.com/hook").url == "https://example.com/hook"
    rotated = gq.rotate_webhook_secret()
    assert (rotated.url, rotated.secret != first.secret) == ("https://example.com/hook", True)
    assert gq.set_webhook(None).url is None


def test_a_session_that_ended_before_it_ran_has_no_terminal(gq):
    job = gq.submit(command_spec("pass", gpus=0) | {"kind": "session"})
    gq.cancel(job.id)
    with pytest.raises(http.ApiError, match=f"^409: job {job.id} is cancelled: only a running"):
        gq.terminal(job.id)
    assert "".join(gq.follow_logs(job.id)) == ""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("terminal") / "gpuq")
    srv.start()
    yield srv
    srv.kill()


def test_a_session_is_typed_to_through_its_terminal(server):
    echo = "import sys; print('got', sys.stdin.readline().strip(), flush=True)"
    spec = command_spec(echo, gpus=0) | {"kind": "session"}
    with Gpuq(server.url) as gq:
        job = gq.submit(spec)
        shown = b""
        with gq.terminal(job.id, timeout_s=60) as terminal:
            terminal.send(b"hello\n")
            for message in terminal:  # until the program ends, which closes it
                shown += message if isinstance(message, bytes) else message.encode()
        assert b"got hello" in shown
        assert gq.wait(job.id, timeout_s=60).status == "succeeded"
