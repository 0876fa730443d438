"""A tool call naming an argument the tool does not take is refused, not run without it:
the SDK would drop `colour` and run the rest, and the agent would never learn that what it
meant was not done."""

from collections.abc import Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent


class StrictArguments:
    """Server middleware: `tools/call` with an unknown argument answers a tool error."""

    def __init__(self, mcp: MCPServer) -> None:
        self.mcp = mcp
        self.takes: dict[str, set[str]] | None = None

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        if self.takes is None:  # the tools are all added by the first call
            tools = await self.mcp.list_tools()
            self.takes = {t.name: set(t.input_schema.get("properties", {})) for t in tools}
        name, given = params.get("name"), params.get("arguments")
        takes = self.takes.get(name) if isinstance(name, str) else None
        if takes is None or not isinstance(given, Mapping):
            return await call_next(ctx)
        unknown = sorted(str(k) for k in given if k not in takes)
        if not unknown:
            return await call_next(ctx)
        words = (
            f"Error executing tool {name}: {', '.join(unknown)}: not an argument of {name}; "
            f"it takes {', '.join(sorted(takes)) or 'none'}"
        )
        return CallToolResult(content=[TextContent(type="text", text=words)], is_error=True)
