"""``DirectRoute``: a FastAPI route whose endpoint gets its arguments read straight from the
request, not through FastAPI's dependency solving, which cost a single POST about an eighth
of its time in the server (bench/http_api.py, docs/benchmarks.md section 12).

It serves endpoints of one shape only: the ``Request``, one JSON body (a pydantic type, checked
by FastAPI's own field, so its errors name the same places) and optional string headers; it
refuses any other at start-up. The OpenAPI document is FastAPI's, made from the same
signature. The body is read as FastAPI reads it (a JSON content type parsed with ``json``, any
other kept as bytes, an empty body missing), and a body that does not parse or validate raises
the ``RequestValidationError`` FastAPI would, so the problem handlers answer it as before.

A route may name a ``quick`` reading of a JSON body: a function of the raw bytes giving the
body's value (pydantic's ``validate_json``, which parses and validates in one pass, with no
Python objects between: a batch of 100 in two thirds of the time of ``json.loads`` then
validation, a single notification in two fifths). Whatever it cannot read (it raises a
``ValueError``, as a pydantic ``ValidationError`` is) goes the usual way, which decides and
names the errors: a body is answered the same either way, only sooner.
"""

from __future__ import annotations

import contextlib
import email.message
import functools
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, APIRouter
from starlette.exceptions import HTTPException

__all__ = ["DirectRoute", "direct_post"]

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
Endpoint = TypeVar("Endpoint", bound=Callable[..., Coroutine[Any, Any, Any]])
Quick = Callable[[bytes], Any]
_MISSING: dict[str, Any] = {"type": "missing", "loc": ("body",), "msg": "Field required"}


def direct_post(
    router: APIRouter, path: str, *, quick: Quick | None = None, **options: Any
) -> Callable[[Endpoint], Endpoint]:
    """``@direct_post(router, path, ...)``: ``@router.post(path, ...)``, served by a
    ``DirectRoute`` (reading a JSON body with ``quick`` first, if given)."""

    class Route(DirectRoute):
        quick_body = staticmethod(quick) if quick is not None else None

    def add(endpoint: Endpoint) -> Endpoint:
        router.add_api_route(
            path, endpoint, methods=["POST"], route_class_override=Route, **options
        )
        return endpoint

    return add


class DirectRoute(APIRoute):
    """A route whose endpoint takes a ``Request``, one body and optional ``str`` headers."""

    quick_body: Quick | None = None

    def get_route_handler(self) -> Handler:
        dependant = self.dependant
        body_field = self.body_field
        others = (
            dependant.dependencies,
            dependant.path_params,
            dependant.query_params,
            dependant.cookie_params,
        )
        header_params = dependant.header_params
        headers = [(h.name, h.alias) for h in header_params if not h.field_info.is_required()]
        if (
            any(others)
            or body_field is None
            or len(dependant.body_params) != 1
            or len(headers) != len(header_params)
            or any(h.field_info.annotation != str | None for h in header_params)
            or dependant.request_param_name is None
        ):
            raise TypeError(f"{self.path}: DirectRoute takes a Request, a body and str headers")
        endpoint = self.endpoint
        request_name = dependant.request_param_name
        body_name = body_field.name
        quick = self.quick_body

        async def handle(request: Request) -> Response:
            raw, is_json = await _raw(request)
            value: Any = _UNREAD
            if quick is not None and is_json and raw:
                with contextlib.suppress(ValueError):  # the usual way decides, naming errors
                    value = quick(raw)
            if value is _UNREAD:
                body = _parsed(raw, is_json)
                if body is None:
                    value, errors = None, [{**_MISSING, "input": None}]
                else:
                    value, errors = body_field.validate(body, {}, loc=("body",))
                if errors:
                    raise RequestValidationError(errors, body=body)
            found = request.headers
            arguments = {name: found.get(alias) for name, alias in headers}
            response: Response = await endpoint(
                **arguments, **{request_name: request, body_name: value}
            )
            return response

        return handle


_UNREAD = object()


async def _raw(request: Request) -> tuple[bytes, bool]:
    """The body's bytes, and whether its content type is JSON."""
    try:
        raw = await request.body()
    except HTTPException:  # the guard's 413, raised while the body arrives
        raise
    except Exception as exc:  # as FastAPI answers it: the client went away...
        raise HTTPException(400, "There was an error parsing the body") from exc
    content_type = request.headers.get("content-type")
    return raw, content_type is not None and _is_json(content_type)


def _parsed(raw: bytes, is_json: bool) -> Any:
    """The body as FastAPI gives it to validation: parsed JSON, the bytes of a body of
    another type, or None for an empty one."""
    if not raw:
        return None
    if not is_json:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError([{**error, "input": {}}], body=exc.doc) from exc
    except Exception as exc:  # as FastAPI answers it: not UTF-8...
        raise HTTPException(400, "There was an error parsing the body") from exc


@functools.lru_cache(maxsize=64)  # clients send a few content types, again and again
def _is_json(content_type: str) -> bool:
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )
