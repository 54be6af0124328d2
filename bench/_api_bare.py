"""The ceiling ``bench/http_api.py`` holds the API against: a bare endpoint on the same framework
and server (FastAPI on uvicorn), validating the same request model and answering 202, with no
key to check and no store. Run by ``bench/http_api.py`` as ``uvicorn _api_bare:app``."""

from __future__ import annotations

import itertools
from typing import Annotated

from fastapi import Body, FastAPI

from api.models import Batch, BatchAnswer, NewNotification, Queued

app = FastAPI()
_ids = itertools.count(1)


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/notifications", status_code=202, response_model=Queued | BatchAnswer)
async def post(body: Annotated[NewNotification | Batch, Body()]) -> Queued | BatchAnswer:
    items = body.notifications if isinstance(body, Batch) else [body]
    answers = [
        Queued(id=next(_ids), state="queued", duplicate=False, provider=i.provider, key=i.key)
        for i in items
    ]
    return BatchAnswer(notifications=answers) if isinstance(body, Batch) else answers[0]
