"""The baseline: bare FastAPI endpoints served like gpuq is: constant JSON, and (for
`bench.accept_path`) a job spec validated, then also stored durably."""

import os
import sqlite3
import threading
from functools import cache

from fastapi import FastAPI

from gpuq.contract.spec import JobSpec

app = FastAPI()
BODY = {"id": 1, "name": "bare", "status": "queued"}
#: where `/stored` keeps its jobs (`bench.common.bare_server` sets it)
DATABASE = "GPUQ_BENCH_BARE_DB"


@app.get("/const")
def const() -> dict[str, object]:
    return BODY


@app.post("/validated", status_code=201)
def validated(spec: JobSpec) -> dict[str, object]:
    """The spec checked as gpuq checks it, and nothing stored."""
    return BODY


@app.post("/stored", status_code=201)
def stored(spec: JobSpec) -> dict[str, object]:
    """The spec checked, then stored as `store` does, one request at a time."""
    connection, lock = _database()
    with lock:
        return {**BODY, "id": store(connection, spec)}


def open_jobs(path: str) -> sqlite3.Connection:
    """A database of bare jobs, committed as gpuq's SQLite commits are (WAL,
    `synchronous=FULL`)."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("CREATE TABLE IF NOT EXISTS job (id INTEGER PRIMARY KEY, spec TEXT)")
    return connection


def store(connection: sqlite3.Connection, spec: JobSpec) -> int | None:
    """One insert in a transaction of its own, on disk when this returns; the job's id."""
    connection.execute("BEGIN IMMEDIATE")
    cursor = connection.execute("INSERT INTO job (spec) VALUES (?)", (spec.model_dump_json(),))
    connection.execute("COMMIT")
    return cursor.lastrowid


@cache
def _database() -> tuple[sqlite3.Connection, threading.Lock]:
    return open_jobs(os.environ[DATABASE]), threading.Lock()
