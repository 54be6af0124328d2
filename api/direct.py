"""``DirectRoute``: a FastAPI route whose endpoint gets its arguments read straight from the
request, not through FastAPI's dependency solving, which cost a single POST about an eighth
of its time in the server (bench/http_api.py, docs/benchmarks.md section 12).

It serves endpoints of one shape only: the ``Request``, one JSON body (a pydantic type, checked
by FastAPI's own field, so its errors name the same places) and optional string headers; it
refuses any other at start-up. The OpenAPI document is FastAPI's, made from the same
signature. The body is read as FastAPI reads it (a JSON content type parsed with ``json``, any
other kept as bytes, an empty body missing), and a body that does not parse or validate raises
the ``RequestValidationError`` FastAPI would, so the problem handlers answer it as before.
"""

from __future__ import annotations

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
_MISSING: dict[str, Any] = {"type": "missing", "loc": ("body",), "msg": "Field required"}


def direct_post(router: APIRouter, path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
    """``@direct_post(router, path, ...)``: ``@router.post(path, ...)``, served by a
    ``DirectRoute``."""

    def add(endpoint: Endpoint) -> Endpoint:
        router.add_api_route(
            path, endpoint, methods=["POST"], route_class_override=DirectRoute, **options
        )
        return endpoint

    return add


class DirectRoute(APIRoute):
    """A route whose endpoint takes a ``Request``, one body and optional ``str`` headers."""

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

        async def handle(request: Request) -> Response:
            body = await _body(request)
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


async def _body(request: Request) -> Any:
    """The body as FastAPI gives it to validation: parsed JSON, the bytes of a body of
    another type, or None for an empty one."""
    try:
        raw = await request.body()
        if not raw:
            return None
        content_type = request.headers.get("content-type")
        if content_type is None or not _is_json(content_type):
            return raw
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError([{**error, "input": {}}], body=exc.doc) from exc
    except HTTPException:  # the guard's 413, raised while the body arrives
        raise
    except Exception as exc:  # as FastAPI answers it: the client went away, not UTF-8...
        raise HTTPException(400, "There was an error parsing the body") from exc


@functools.lru_cache(maxsize=64)  # clients send a few content types, again and again
def _is_json(content_type: str) -> bool:
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )
