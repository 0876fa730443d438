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
    """The spec checked, then one insert committed to disk before the answer, as gpuq's
    SQLite commits are (WAL, `synchronous=FULL`), one transaction per request."""
    connection, lock = _database()
    with lock:
        connection.execute("BEGIN IMMEDIATE")
        cursor = connection.execute("INSERT INTO job (spec) VALUES (?)", (spec.model_dump_json(),))
        connection.execute("COMMIT")
    return {**BODY, "id": cursor.lastrowid}


@cache
def _database() -> tuple[sqlite3.Connection, threading.Lock]:
    connection = sqlite3.connect(
        os.environ[DATABASE], isolation_level=None, check_same_thread=False
    )
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("CREATE TABLE IF NOT EXISTS job (id INTEGER PRIMARY KEY, spec TEXT)")
    return connection, threading.Lock()
