"""`/`: the dashboard, one static page that reads the public API (no build step)."""

from functools import cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter()

PAGE = Path(__file__).parent.parent / "static" / "dashboard.html"


@cache
def _page() -> str:
    return PAGE.read_text()


@router.get("/", include_in_schema=False)
def dashboard() -> HTMLResponse:
    """The page itself holds no data; it asks for a token when the API wants one."""
    return HTMLResponse(_page())
