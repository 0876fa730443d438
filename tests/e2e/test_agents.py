"""`gpuq mcp` driven by the MCP SDK's own client over stdio (and once over streamable
HTTP), against a real `gpuq serve`: the tools each user gets, a command job read through a
tool and through a subscribed resource, dry runs, a sweep's leaderboard, triage, another
member's job refused, and malformed arguments answered as tool errors."""

import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.server import GPUQ, Server, free_port

pytestmark = pytest.mark.e2e

ADMIN_TOOLS = {"drain_gpus", "resume_gpus", "audit_log"}
MEMBER_TOOLS = {
    "submit_job", "run_command", "dry_run", "preview_job", "list_jobs", "show_job",
    "job_log", "job_metrics", "cancel_job", "hold_job", "release_job", "gpus", "queue",
    "create_sweep", "list_sweeps", "sweep_leaderboard", "cancel_sweep", "usage", "triage_job",
}  # fmt: skip


class Box:
    """A real gpuq serve with three users, and `gpuq mcp` for each of them."""

    def __init__(self, server: Server, tokens: dict[str, str], project: Path) -> None:
        self.server, self.tokens, self.project = server, tokens, project

    def params(self, user: str) -> StdioServerParameters:
        env = {**self.server.env, "GPUQ_TOKEN": self.tokens[user]}
        return StdioServerParameters(
            command=GPUQ[0], args=[*GPUQ[1:], "mcp"], env=env, cwd=str(self.project)
        )

    def session(self, user: str, call: Callable[[Client], Awaitable[Any]], **client: Any) -> Any:
        """Runs `call` with an MCP client of `user`'s `gpuq mcp` over stdio."""

        async def scenario() -> Any:
            async with Client(self.params(user), **client) as mcp:
                return await call(mcp)

        return anyio.run(scenario)


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    home = tmp_path_factory.mktemp("agents")
    project = home / "project"
    project.mkdir()
    server = Server(home / "state")
    server.env["GPUQ_DATA_DIRS"] = str(project)
    server.env.pop("GPUQ_TOKEN", None)
    tokens = {
        name: server.cli("users", "add", name, *extra).split()[-1]
        for name, extra in (("ana", ()), ("bo", ()), ("root", ("--admin",)))
    }
    server.start()
    try:
        yield Box(server, tokens, project)
    finally:
        server.kill()


def ran(answer: mcp_types.CallToolResult) -> dict[str, Any]:
    assert not answer.is_error, answer.content
    assert answer.structured_content is not None
    return answer.structured_content


def refusal(answer: mcp_types.CallToolResult) -> str:
    assert answer.is_error, answer.structured_content
    text = answer.content[0]
    assert isinstance(text, mcp_types.TextContent)
    return text.text


async def until_ended(mcp: Client, job_id: int, timeout_s: float = 60) -> dict[str, Any]:
    with anyio.fail_after(timeout_s):
        while True:
            job = ran(await mcp.call_tool("show_job", {"job_id": job_id}))
            if job["status"] in ("succeeded", "failed", "cancelled", "timed_out"):
                return job
            await anyio.sleep(0.3)


def test_a_member_gets_the_members_tools_typed_and_marked_and_an_admin_more(box: Box) -> None:
    async def tools(mcp: Client) -> list[mcp_types.Tool]:
        return (await mcp.list_tools()).tools

    ana = {t.name: t for t in box.session("ana", tools)}
    assert set(ana) == MEMBER_TOOLS  # no admin tool is even listed for a member
    root = {t.name for t in box.session("root", tools)}
    assert root == MEMBER_TOOLS | ADMIN_TOOLS
    for name in ("cancel_job", "cancel_sweep"):
        hints = ana[name].annotations
        assert hints is not None and hints.destructive_hint is True and not hints.read_only_hint
    for name in ("show_job", "job_log", "dry_run", "queue", "triage_job", "gpus"):
        hints = ana[name].annotations
        assert hints is not None and hints.read_only_hint is True
    assert ana["submit_job"].annotations.destructive_hint is False  # type: ignore[union-attr]
    # The inputs are the API's own models: a job spec's schema, the command's arguments.
    spec = ana["submit_job"].input_schema
    assert "spec" in spec["required"] and "JobSpec" in json.dumps(spec)
    run = ana["run_command"].input_schema["properties"]
    assert {"program", "args", "folder", "gpus", "memory", "time_limit", "env", "sweep"} <= set(run)
    assert ana["show_job"].output_schema is not None
    assert all(len(t.description or "") > 40 for t in ana.values())


def test_a_command_job_is_run_and_its_log_read_through_a_tool_and_a_followed_resource(
    box: Box,
) -> None:
    script = 'for i in 1 2 3; do echo "line $i"; sleep 0.7; done; echo done >&2'

    async def scenario(mcp: Client) -> tuple[dict[str, Any], list[str], str, dict[str, Any]]:
        submitted = ran(await mcp.call_tool(
            "run_command", {"program": "bash", "args": ["-c", script], "gpus": 0}
        ))  # fmt: skip
        job_id = submitted["job"]["id"]
        uri = f"gpuq://jobs/{job_id}/log"
        heard: list[str] = []
        async with mcp.listen(resource_subscriptions=[uri]) as stream:
            with anyio.move_on_after(20):
                async for event in stream:
                    heard.append(event.uri)  # type: ignore[union-attr]
                    read = await mcp.read_resource(uri)
                    if "done" in read.contents[0].text:  # type: ignore[union-attr]
                        break
        job = await until_ended(mcp, job_id)
        log = ran(await mcp.call_tool("job_log", {"job_id": job_id}))
        resource = (await mcp.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
        return job, heard, resource, log

    job, heard, resource, log = box.session("ana", scenario)
    assert job["status"] == "succeeded" and job["owner"] == "ana"
    assert heard and set(heard) == {f"gpuq://jobs/{job['id']}/log"}  # told, not polled
    assert resource == "line 1\nline 2\nline 3\ndone\n"
    assert log["text"] == resource and log["next_offset"] == len(resource) and not log["more"]

    async def from_offset(mcp: Client) -> dict[str, Any]:
        return ran(await mcp.call_tool("job_log", {"job_id": job["id"], "offset": 7}))

    assert box.session("ana", from_offset)["text"] == "line 2\nline 3\ndone\n"


def test_an_older_client_subscribes_to_a_log_the_older_way(box: Box) -> None:
    told: list[str] = []

    async def heard(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            told.append(message.params.uri)

    async def scenario(mcp: Client) -> None:
        script = "for i in 1 2 3; do echo $i; sleep 0.5; done"
        submitted = ran(await mcp.call_tool(
            "run_command", {"program": "bash", "args": ["-c", script], "gpus": 0}
        ))  # fmt: skip
        uri = f"gpuq://jobs/{submitted['job']['id']}/log"
        assert mcp.server_capabilities.resources.subscribe  # type: ignore[union-attr]
        await mcp.session.subscribe_resource(uri)  # type: ignore[deprecated]
        with anyio.fail_after(20):
            while not told:
                await anyio.sleep(0.1)
        assert told[0] == uri

    box.session("ana", scenario, mode="legacy", message_handler=heard)


def test_a_dry_run_says_where_a_job_would_start_and_a_box_too_small_is_refused(box: Box) -> None:
    async def scenario(mcp: Client) -> tuple[dict[str, Any], str, dict[str, Any]]:
        fits = ran(await mcp.call_tool("dry_run", {"program": "true", "gpus": 1}))
        too_big = refusal(await mcp.call_tool("dry_run", {"program": "true", "gpus": 3}))
        jobs = ran(await mcp.call_tool("list_jobs", {"status": ["queued"]}))
        return fits, too_big, jobs

    fits, too_big, jobs = box.session("ana", scenario)
    assert fits["would_start"] is True and len(fits["assigned_gpus"]) == 1
    assert fits["placement"]
    assert "resources.gpus" in too_big and "box has 2" in too_big
    assert jobs["jobs"] == []  # nothing was queued


def test_a_sweep_is_run_and_its_leaderboard_ranks_the_members(box: Box) -> None:
    report = (
        'echo "{\\"event\\": \\"epoch\\", \\"epoch\\": 1, '
        '\\"metrics\\": {\\"loss\\": $GPUQ_PARAM_X}}" >> "$GPUQ_EVENTS"'
    )

    async def scenario(mcp: Client) -> dict[str, Any]:
        made = ran(await mcp.call_tool("run_command", {
            "program": "bash", "args": ["-c", report], "gpus": 0,
            "sweep": {"x": [0.5, 0.25, 2]}, "metric": "loss",
        }))["sweep"]  # fmt: skip
        with anyio.fail_after(60):
            while True:
                board = ran(await mcp.call_tool("sweep_leaderboard", {"sweep_id": made["id"]}))
                if board["status"] == "ended":
                    return board
                await anyio.sleep(0.5)

    board = box.session("ana", scenario)
    assert board["size"] == 3 and board["metric"] == "loss"
    ranked = [(m["rank"], m["params"]["x"], m["best"]) for m in board["members"]]
    assert ranked == [(1, 0.25, 0.25), (2, 0.5, 0.5), (3, 2, 2.0)]


def test_triage_says_why_a_job_failed_and_why_one_waits(box: Box) -> None:
    async def scenario(mcp: Client) -> tuple[dict[str, Any], dict[str, Any]]:
        failing = ran(await mcp.call_tool("run_command", {
            "program": "bash", "args": ["-c", "echo 'cannot open data.npz' >&2; exit 3"],
            "gpus": 0,
        }))["job"]  # fmt: skip
        await until_ended(mcp, failing["id"])
        failed = ran(await mcp.call_tool("triage_job", {"job_id": failing["id"]}))
        sleeper = {"program": "sleep", "args": ["30"], "gpus": 0}
        blocker = ran(await mcp.call_tool("run_command", sleeper))["job"]
        after = {**sleeper, "after": [blocker["id"]]}
        waiting = ran(await mcp.call_tool("run_command", after))["job"]
        ran(await mcp.call_tool("hold_job", {"job_id": waiting["id"]}))
        told = ran(await mcp.call_tool("triage_job", {"job_id": waiting["id"]}))
        for job in (waiting, blocker):
            ran(await mcp.call_tool("cancel_job", {"job_id": job["id"]}))
        return failed, told | {"blocker": blocker["id"]}

    failed, waiting = box.session("ana", scenario)
    assert failed["status"] == "failed" and failed["reason"] == "nonzero_exit"
    assert failed["exit_code"] == 3 and "cannot open data.npz" in failed["log_tail"]
    assert "failed (nonzero_exit)" in failed["verdict"] and failed["next_steps"]
    assert waiting["status"] == "queued" and "is held" in waiting["verdict"]
    assert any("release_job" in step for step in waiting["next_steps"])
    assert any(f"job {waiting['blocker']} has succeeded" in s for s in waiting["next_steps"])
    assert waiting["dry_run"] is not None and waiting["dry_run"]["would_start"] is True


def test_another_members_job_is_refused_as_the_api_refuses_it(box: Box) -> None:
    async def start(mcp: Client) -> int:
        answer = ran(await mcp.call_tool(
            "run_command", {"program": "sleep", "args": ["60"], "gpus": 0, "name": "anas"}
        ))  # fmt: skip
        return int(answer["job"]["id"])

    anas = box.session("ana", start)

    async def as_bo(mcp: Client) -> tuple[list[str], str, dict[str, Any]]:
        refused = [
            refusal(await mcp.call_tool(tool, {"job_id": anas}))
            for tool in ("cancel_job", "hold_job", "release_job")
        ]
        unlisted = refusal(await mcp.call_tool("drain_gpus", {}))
        seen = ran(await mcp.call_tool("show_job", {"job_id": anas}))
        return refused, unlisted, seen

    refused, unlisted, seen = box.session("bo", as_bo)
    assert all("403" in r and "ana" in r for r in refused), refused
    assert "drain_gpus" in unlisted  # an admin tool is not there to call
    # What the API shows bo of ana's job, and nothing more (GPUQ_RUN_AS=service: her log
    # is readable; her webhook is not): the same answer as bo's own API call.
    api = httpx.get(
        f"{box.server.url}/v1/jobs/{anas}",
        headers={"Authorization": f"Bearer {box.tokens['bo']}"},
    ).json()
    assert seen["owner"] == "ana" and seen["hidden"] == api["hidden"]
    assert seen["spec"] == api["spec"]

    async def as_ana(mcp: Client) -> dict[str, Any]:
        return ran(await mcp.call_tool("cancel_job", {"job_id": anas}))

    assert box.session("ana", as_ana)["status"] in ("cancelled", "running")


def test_malformed_arguments_are_tool_errors_and_the_server_goes_on(box: Box) -> None:
    async def scenario(mcp: Client) -> tuple[list[str], int]:
        answers = [
            await mcp.call_tool("cancel_job", {"job_id": "seven"}),
            await mcp.call_tool("cancel_job", {}),
            await mcp.call_tool("show_job", {"job_id": -1}),
            await mcp.call_tool("run_command", {"program": "true", "memory": "lots"}),
            await mcp.call_tool("run_command", {"program": "true", "colour": "red"}),
            await mcp.call_tool("run_command", {"program": "no-such-program-here"}),
            await mcp.call_tool("run_command", {"program": "true", "folder": "relative/x"}),
            await mcp.call_tool("submit_job", {"spec": {"name": "x"}}),
            await mcp.call_tool("submit_job", {"spec": "[not json"}),
            await mcp.call_tool("show_job", {"job_id": 10**9}),
            await mcp.call_tool("job_log", {"job_id": 1, "tail_lines": 10**9}),
        ]
        texts = [refusal(a) for a in answers]
        return texts, len((await mcp.list_tools()).tools)

    texts, tools = box.session("ana", scenario)
    assert "job_id" in texts[0] and "job_id" in texts[1] and "job_id" in texts[2]
    assert "memory" in texts[3] and "'lots' is not a memory size" in texts[3]
    assert "colour" in texts[4]
    assert "program" in texts[5] and "not on your PATH" in texts[5]
    assert "folder" in texts[6]
    assert "spec" in texts[7] and "needs" in texts[7]  # the contract's own check
    assert "spec" in texts[8]
    assert "404" in texts[9]
    assert "tail_lines" in texts[10]
    assert tools == len(MEMBER_TOOLS)  # the same server still answers


def test_gpuq_mcp_serves_streamable_http_on_loopback_to_the_holder_of_its_secret(
    box: Box,
) -> None:
    port = free_port()
    env = {**box.server.env, "GPUQ_TOKEN": box.tokens["bo"]}
    env.pop("GPUQ_MCP_SECRET", None)
    proc = subprocess.Popen(
        [*GPUQ, "mcp", "--http", "--port", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        said = [proc.stderr.readline(), proc.stderr.readline()]
        assert said[0].strip() == f"gpuq: MCP for bo at http://127.0.0.1:{port}/mcp"
        header = said[1].strip().removeprefix("gpuq: send the header: ")
        name, _, value = header.partition(": ")
        assert name == "Authorization" and value.startswith("Bearer ")
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                # Another account on the box, without the secret: refused, told nothing.
                refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert refused.status_code == 401 and "Bearer" in refused.text

        async def scenario() -> set[str]:
            with_secret = httpx2.AsyncClient(headers={"Authorization": value})
            transport = streamable_http_client(url, http_client=with_secret)
            async with with_secret, Client(transport) as mcp:
                return {t.name for t in (await mcp.list_tools()).tools}

        assert anyio.run(scenario) == MEMBER_TOOLS
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_gpuq_mcp_without_gpuq_says_so_and_exits_1(box: Box) -> None:
    env = {**os.environ, "GPUQ_URL": f"http://127.0.0.1:{free_port()}", "GPUQ_TOKEN": "x"}
    done = subprocess.run(
        [*GPUQ, "mcp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert "cannot serve agents: cannot reach gpuq" in done.stderr
    assert done.stdout == ""  # stdout is the protocol's: nothing else ever goes there
