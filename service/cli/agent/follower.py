"""Resource subscriptions: the jobs whose log or metrics a client follows are looked at
once a second through the API, and each change is told to those following it, on both
protocol eras: `subscriptions/listen` (2026-07-28) and `resources/subscribe` (before).

The agent follows a job without calling tools in a loop; gpuq mcp asks two cheap
questions a second per followed job: the log's size, the job's revision.
"""

import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import ListenHandler, ResourceUpdated, SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    UnsubscribeRequestParams,
)

from gpuq.client import Gpuq
from gpuq.http import ApiError
from service.cli.agent.job_resources import ADDRESS

log = logging.getLogger(__name__)

#: how often followed jobs are looked at
INTERVAL_S = 1.0
#: the most resources followed at once: each costs an API call a second
MAX_FOLLOWED = 64

Marker = tuple[Any, ...]


class Follower:
    """The followed resources, what each looked like last, and who to tell of a change."""

    def __init__(self, gq: Gpuq, bus: SubscriptionBus, interval_s: float = INTERVAL_S) -> None:
        self.gq = gq
        self.bus = bus
        self.interval_s = interval_s
        #: uri -> open listen streams that name it
        self.listened: Counter[str] = Counter()
        #: uri -> the sessions subscribed to it the older way
        self.sessions: dict[str, set[Any]] = {}
        self.seen: dict[str, Marker] = {}

    async def follow(self, uri: str) -> None:
        """Starts following `uri` from how it is now; refused (`MCPError`) if it is not a
        job's resource, or the user may not read it."""
        if uri in self.seen:
            return
        if len(self.seen) >= MAX_FOLLOWED:
            raise MCPError(INVALID_PARAMS, f"{uri}: {MAX_FOLLOWED} resources are followed already")
        self.seen[uri] = await anyio.to_thread.run_sync(self.marker, uri)

    def marker(self, uri: str) -> Marker:
        """What changes when the resource does: the log's size, or the job's revision."""
        found = ADDRESS.fullmatch(uri)
        if found is None:
            raise MCPError(INVALID_PARAMS, f"{uri}: not a resource of gpuq (gpuq://jobs/N/log)")
        job_id, part = int(found.group(1)), found.group(2)
        try:
            if part == "log":
                answer = self.gq.http.request("GET", f"/v1/jobs/{job_id}/logs", params={"tail": 1})
                return (answer.headers.get("X-Next-Offset"),)
            return (self.gq.http.json("GET", f"/v1/jobs/{job_id}")["revision"],)
        except ApiError as exc:
            raise MCPError(INVALID_PARAMS, f"{uri}: {exc}") from exc

    def followed(self) -> set[str]:
        return {u for u, n in self.listened.items() if n > 0} | set(self.sessions)

    async def run(self) -> None:
        """Looks at every followed resource each `interval_s`, for as long as it runs."""
        while True:
            await anyio.sleep(self.interval_s)
            for uri in sorted(self.followed()):
                try:
                    now = await anyio.to_thread.run_sync(self.marker, uri)
                except MCPError as exc:  # the job went away, or gpuq did: try again later
                    log.debug("%s", exc.error.message)
                    continue
                if self.seen.get(uri) != now:
                    self.seen[uri] = now
                    await self.tell(uri)
            for uri in set(self.seen) - self.followed():
                del self.seen[uri]

    async def tell(self, uri: str) -> None:
        """Tells everyone following `uri` that it changed."""
        await self.bus.publish(ResourceUpdated(uri=uri))
        for session in list(self.sessions.get(uri, ())):
            try:
                await session.send_resource_updated(uri)
            except Exception:
                self.sessions.get(uri, set()).discard(session)

    # The request handlers, added to the server's own (`install`).

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        await self.follow(params.uri)
        self.sessions.setdefault(params.uri, set()).add(ctx.session)
        return EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        held = self.sessions.get(params.uri, set())
        held.discard(ctx.session)
        if not held:
            self.sessions.pop(params.uri, None)
        return EmptyResult()

    def listening(self, listen: ListenHandler) -> Callable[..., Awaitable[Any]]:
        """`listen`, following the resources each stream names while it is open."""

        async def handler(
            ctx: ServerRequestContext[Any], params: SubscriptionsListenRequestParams
        ) -> Any:
            uris = params.notifications.resource_subscriptions or []
            for uri in uris:
                await self.follow(uri)
            self.listened.update(uris)
            try:
                return await listen(ctx, params)
            finally:
                self.listened.subtract(uris)

        return handler

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The server's lifespan: the loop runs while the server does."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.run)
            yield
            tasks.cancel_scope.cancel()
