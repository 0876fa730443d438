"""Maps domain errors to HTTP once, in FastAPI's `{"detail": ...}` shape."""

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from service.errors import GpuqError, Invalid


class Detail(BaseModel):
    detail: str = Field(description="What went wrong, in one line.")


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route can answer."""
    words = {
        400: "The body could not be read (e.g. not UTF-8).",
        401: "No token, or an unknown or revoked one.",
        403: "Someone else's job, or a task for an admin.",
        429: "Over a per-user quota.",
        404: "No such job or GPU.",
        409: "The request conflicts with the current state (e.g. the job already ended).",
        413: "The request body is over 1 MiB.",
        503: "Slurm's controller did not answer (GPUQ_EXECUTOR=slurm); try again.",
    }
    return {code: {"model": Detail, "description": words[code]} for code in codes}


async def _gpuq_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GpuqError)
    if isinstance(exc, Invalid):
        # The same shape as FastAPI's own validation errors, so clients parse one format.
        detail: object = [{"type": "value_error", "loc": list(exc.loc), "msg": exc.message}]
    else:
        detail = exc.message
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)


def _json_safe(value: Any) -> Any:
    """`value` with what JSON cannot carry (NaN, infinities, bytes) made into strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    # FastAPI's own handler echoes the offending input, which may be NaN or 1e400 and
    # then fails to encode: a 500 for bad input. Same shape, made safe.
    assert isinstance(exc, RequestValidationError)
    errors = [
        _json_safe(jsonable_encoder(e, custom_encoder={float: _json_safe})) for e in exc.errors()
    ]
    return JSONResponse({"detail": errors}, status_code=422)


def install(app: FastAPI) -> None:
    app.add_exception_handler(GpuqError, _gpuq_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
