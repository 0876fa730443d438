"""How a gpuq tool is registered: its hints (read-only, changing, destructive), the API's
refusals as tool errors the agent can read, and flat arguments from one pydantic model."""

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

from gpuq.http import ApiError

#: only reads: a client may run it without asking
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
#: changes something that can be changed back (queue, hold, release)
CHANGES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
#: ends work that cannot be resumed as it was (cancel)
DESTROYS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

R = TypeVar("R")


def refusals_as_tool_errors(fn: Callable[..., R]) -> Callable[..., R]:
    """`fn`, with gpuq's refusals (an `ApiError`: `403: job 7 is ana's`) and a bad value
    given (`ValueError`) raised as tool errors whose text the agent sees; anything else
    stays a crash, whose text the SDK keeps from the agent."""

    @functools.wraps(fn)
    def calling(*args: Any, **kwargs: Any) -> R:
        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            raise ToolError(str(exc)) from exc
        except typer.BadParameter as exc:  # from the CLI's own code the tools share
            raise ToolError(f"{exc.param_hint or 'argument'}: {exc.message}") from exc
        except ValueError as exc:
            raise ToolError(str(exc)) from exc

    return calling


def add_tools(mcp: MCPServer, annotations: ToolAnnotations, *tools: Callable[..., Any]) -> None:
    """Registers each of `tools` under its function's name, its docstring as what the agent
    reads about it."""
    for tool in tools:
        mcp.add_tool(refusals_as_tool_errors(tool), annotations=annotations)


M = TypeVar("M", bound=BaseModel)


def flat(model: type[M], act: Callable[[M], R], name: str, doc: str) -> Callable[..., R]:
    """A tool taking `model`'s fields as its own arguments (`program`, `gpus`...), not one
    nested object, that calls `act` with them as a `model`; two tools can share one model."""
    parameters = [
        inspect.Parameter(
            field_name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if field.is_required() else field.default,
            annotation=Annotated[field.annotation, field],
        )
        for field_name, field in model.model_fields.items()
    ]
    return_annotation = inspect.signature(act, eval_str=True).return_annotation

    def tool(**given: Any) -> R:
        return act(model.model_validate(given))

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = doc
    tool.__signature__ = inspect.Signature(parameters, return_annotation=return_annotation)  # type: ignore[attr-defined]
    return tool
