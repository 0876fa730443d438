"""The baseline: a bare FastAPI endpoint answering constant JSON, served like gpuq is."""

from fastapi import FastAPI

app = FastAPI()
BODY = {"id": 1, "name": "bare", "status": "queued"}


@app.get("/const")
def const() -> dict[str, object]:
    return BODY
