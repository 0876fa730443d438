"""Domain errors; `service.api.errors` maps each family to its HTTP status once."""


class GpuqError(Exception):
    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthorized(GpuqError):
    """No valid token."""

    status_code = 401


class Forbidden(GpuqError):
    """A valid token, but not for this: someone else's job, or an admin's task."""

    status_code = 403


class TooMany(GpuqError):
    """Over a quota."""

    status_code = 429


class NotFound(GpuqError):
    status_code = 404


class Conflict(GpuqError):
    status_code = 409


class Invalid(GpuqError):
    """A request that can never be served; `loc` names the offending field."""

    status_code = 422

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class Unavailable(GpuqError):
    """Something gpuq depends on (Slurm's controller) does not answer; try again."""

    status_code = 503
