"""Answers serialised once, by pydantic."""

from fastapi import Response
from pydantic import BaseModel


def as_json(model: BaseModel, status_code: int = 200) -> Response:
    """`model` as the JSON body of a response. A route that returns a model has FastAPI
    validate it against the route's response model again before serialising it (for a
    bare route answering a `JobPublic` to 4 clients, a fifth of its rate). The hottest routes
    (submit, poll) build their models themselves, from rows gpuq checks as it reads them,
    and answer with this; they still name their `response_model` for the OpenAPI schema."""
    return Response(model.model_dump_json(), status_code=status_code, media_type="application/json")
