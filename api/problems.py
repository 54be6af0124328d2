"""Errors as RFC 9457 problem details: ``application/problem+json`` with one sentence in
``detail`` (and the request ``field`` at fault, when one is), never a traceback.

Every way a request fails ends here: the routes raise ``ProblemError``; the framework's
validation, routing and the engine's errors are translated by the handlers ``install`` adds.
"""

from __future__ import annotations

import http
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match

from engine import ConfigError, NotFound, OmniPostError, StoreUnavailable

__all__ = ["PROBLEM_JSON", "ProblemError", "install", "problem"]

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"


class ProblemError(Exception):
    """Answer the request with a problem: ``status`` and the sentence ``detail``."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


def problem(
    status: int,
    detail: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Response:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": http.HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    if field is not None:
        body["field"] = field
    body.update(extra or {})
    content = json.dumps(body, ensure_ascii=False).encode()
    return Response(content, status_code=status, headers=headers, media_type=PROBLEM_JSON)


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:] + "."


def field_path(loc: Sequence[int | str]) -> str:
    """``("body", "notifications", 3, "provider")`` -> ``notifications[3].provider``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _one_shape(errors: Sequence[Any], body: object) -> list[Any]:
    """A body that is one of two shapes (a notification or a batch) comes back with its
    errors tagged by the shape (``("body", "batch", ...)``): untag them."""
    return [
        {**e, "loc": ("body", *e["loc"][2:])}
        if len(e.get("loc", ())) > 1 and e["loc"][0] == "body" and e["loc"][1] in _SHAPES
        else e
        for e in errors
    ]


_SHAPES = {"one", "batch"}  # the tags of ``api.models.Incoming``
_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "is not a field this API knows",
    "string_pattern_mismatch": "is not a name (1-63 letters, digits, '_', '.' or '-')",
}


def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    if any(e.get("type") == "json_invalid" for e in exc.errors()):
        return problem(400, "the body is not valid JSON.")
    body = getattr(exc, "body", None)
    if body is not None and not isinstance(body, dict):
        return problem(422, "the body must be a JSON object.", field="body")
    errors = _one_shape(exc.errors(), body)
    first = errors[0] if errors else {"loc": (), "msg": "the request is not valid", "type": ""}
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return problem(400, "the body is not valid JSON.")
    where, rest = (loc[0], loc[1:]) if loc else ("body", ())
    if where == "path":
        return problem(404, "there is no such notification for this tenant.")
    if where == "body" and not rest and first.get("type") in ("missing", "model_attributes_type"):
        return problem(422, "the body must be a JSON object.", field="body")
    name = field_path(rest) or str(where)
    more = f" ({len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
    msg = _MESSAGES.get(str(first.get("type")), "") or _sentence(str(first.get("msg", "")))[:-1]
    return problem(422, f"{name}: {msg}{more}.", field=name)


def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        return problem(404, f"there is no route {request.url.path}.", headers=headers)
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed(request))
        detail = f"{request.method} is not allowed on {request.url.path}."
        return problem(405, detail, headers=headers)
    return problem(exc.status_code, _sentence(str(exc.detail)), headers=headers)


def _allowed(request: Request) -> list[str]:
    """Every method some route serves at the request's path (the router names only the
    first route it found there)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def _problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem(exc.status, exc.detail, field=exc.field, headers=exc.headers, extra=exc.extra)


def _engine(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OmniPostError)
    if isinstance(exc, NotFound):
        return problem(404, exc.message)
    if isinstance(exc, ConfigError):
        return problem(422, exc.message)
    if isinstance(exc, StoreUnavailable):
        return problem(503, "the store cannot be reached; try again.", headers={"Retry-After": "1"})
    log.warning("%s %s failed: %s", request.method, request.url.path, exc.message)
    return problem(500, "the server failed; the request may be tried again.")


def _anything(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem(500, "the server failed; the request may be tried again.")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(ProblemError, _problem)
    app.add_exception_handler(OmniPostError, _engine)
    app.add_exception_handler(Exception, _anything)
