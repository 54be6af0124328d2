"""The ASGI application: ``create_app(engine)`` serves ``/v1`` (``api.routes``), ``/healthz``
and ``/readyz``, the OpenAPI 3.1 document at ``/v1/openapi.json`` and its page at
``/v1/docs``, inside the guard (``api.guard``) and with every error as problem+json
(``api.problems``). The engine is the caller's: opened before the first request (a
``lifespan`` may do it) and closed after the last."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI, Request

from api import problems
from api.auth import ApiSettings, Door
from api.guard import Guard
from api.metrics import ApiMetrics
from api.models import Health, Problem
from api.routes import router
from api.webhooks import router as webhooks_router
from engine import Engine

__all__ = ["create_app"]

_DESCRIPTION = """\
Queue notifications for a tenant of OmniPost, look at them and cancel them. Authenticate with
one of the tenant's API keys (`omnipost apikey create TENANT`) as `Authorization: Bearer KEY`.
Errors are `application/problem+json` (RFC 9457). Each key has a request limit, told in the
`RateLimit-Policy` and `RateLimit` headers; a POST with an `Idempotency-Key` header may be
repeated safely.
"""


def create_app(
    engine: Engine,
    settings: ApiSettings | None = None,
    *,
    metrics: ApiMetrics | None = None,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
) -> FastAPI:
    settings = settings or ApiSettings()
    metrics = metrics or ApiMetrics()
    app = FastAPI(
        title="OmniPost",
        summary="Rate-limited multi-tenant notification dispatch",
        description=_DESCRIPTION,
        version="1",
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.door = Door(engine, settings, metrics)
    app.state.metrics = metrics
    problems.install(app)
    # The router's routes (their paths and answers complete: ``/v1``, its errors) go on the
    # app's own router: ``include_router`` would put a layer in front of them that finds each
    # request's route anew (a tenth of a single POST's time) and hides their methods from a
    # 405's ``Allow``.
    app.router.routes.extend(router.routes)
    app.router.routes.extend(webhooks_router.routes)

    @app.get("/healthz", summary="The server is up", tags=["health"])
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        summary="The server can reach its store",
        tags=["health"],
        responses={503: {"description": "The store does not answer", "model": Problem}},
    )
    async def readyz(request: Request) -> Health:
        await request.app.state.door.engine.ready()
        return Health(status="ok")

    _problem_schema(app)
    app.add_middleware(Guard, max_body=settings.max_body, metrics=metrics)
    return app


def _problem_schema(app: FastAPI) -> None:
    """Put ``Problem`` among the document's schemas, which the error answers refer to."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            schemas["Problem"] = Problem.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
