"""Maps domain errors to HTTP once, in FastAPI's `{"detail": ...}` shape."""

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.errors import GpuqError, Invalid


async def _gpuq_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GpuqError)
    if isinstance(exc, Invalid):
        # The same shape as FastAPI's own validation errors, so clients parse one format.
        detail: object = [{"type": "value_error", "loc": list(exc.loc), "msg": exc.message}]
    else:
        detail = exc.message
    return JSONResponse({"detail": detail}, status_code=exc.status_code)


def install(app: FastAPI) -> None:
    app.add_exception_handler(GpuqError, _gpuq_error)
