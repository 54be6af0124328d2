"""The routes of ``/v1/webhooks``: the caller's tenant's endpoints for status events, with a key
whose scope includes ``webhooks``. An endpoint made here is always ``https`` to a public address
(private addresses are for an operator to allow, ``omnipost webhook add --allow-private``, never
through the API); its signing secret is in the answer that makes it (or rotates it), and never
again."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.models import utc_text
from api.problems import PROBLEM_JSON
from engine import EVENT_TYPES, EndpointView, NewSecret, event_names

__all__ = ["Webhook", "WebhookCreated", "WebhookIn", "router"]

_PROBLEM: dict[str, Any] = {
    "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"description": what, **_PROBLEM}
    for status, what in (
        (400, "Malformed JSON"),
        (401, "No API key, or one that is unknown or revoked"),
        (403, "The key's scope does not include webhooks"),
        (404, "No such endpoint for this tenant"),
        (413, "The body is over the limit"),
        (415, "The body is not JSON"),
        (422, "A field is not valid: a URL that is not https to a public address, a type"),
        (429, "Over the key's request limit"),
    )
}
router = APIRouter(prefix="/v1", responses=_ERRORS)
_MAX_ID = 2**31 - 1
_TYPES = ", ".join(t.value for t in EVENT_TYPES)


class WebhookIn(BaseModel):
    """An endpoint to subscribe."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(max_length=2000, description="An https URL at a public address")
    events: list[str] | None = Field(
        default=None,
        max_length=len(EVENT_TYPES),
        description=f"Event types (all when absent): {_TYPES}",
    )
    rate_per_s: float | None = Field(
        default=None, gt=0, le=100_000, description="Events a second at most (default 50)"
    )
    burst: float | None = Field(default=None, ge=1, le=1_000_000)


class Webhook(BaseModel):
    """An endpoint and what its outbox holds."""

    id: int
    url: str
    events: list[str]
    enabled: bool
    disabled_reason: str | None
    created_at: str
    pending: int = Field(description="Events not delivered yet")
    failed: int = Field(description="Events given up after every retry")
    oldest_pending_at: str | None


class WebhookCreated(BaseModel):
    """The endpoint, with its signing secret: shown here once, never again."""

    webhook: Webhook
    secret: str = Field(description="whsec_...: verify each event's webhook-signature with it")


class WebhookList(BaseModel):
    webhooks: list[Webhook]


def _webhook(view: EndpointView) -> Webhook:
    e, h = view.endpoint, view.health
    return Webhook(
        id=e.id,
        url=e.url,
        events=event_names(e.events),
        enabled=e.disabled_at is None,
        disabled_reason=e.disabled_reason,
        created_at=utc_text(e.created_at) or "",
        pending=h.pending + h.held,
        failed=h.failed,
        oldest_pending_at=utc_text(h.oldest_pending_at),
    )


async def _made(request: Request, tenant: str, made: NewSecret) -> WebhookCreated:
    door = request.app.state.door
    views = {v.endpoint.id: v for v in await door.engine.webhooks(tenant)}
    return WebhookCreated(webhook=_webhook(views[made.endpoint.id]), secret=made.secret)


@router.post("/webhooks", status_code=201, summary="Subscribe an endpoint to status events")
async def add_webhook(request: Request, response: Response, body: WebhookIn) -> WebhookCreated:
    door = request.app.state.door
    caller = await door.admit(request, "webhooks")
    response.headers.update(caller.limit.headers())
    made = await door.engine.webhook_add(
        caller.tenant,
        body.url,
        events=body.events,
        allow_private=False,
        rate_per_s=body.rate_per_s,
        burst=body.burst,
    )
    return await _made(request, caller.tenant, made)


@router.get("/webhooks", summary="The tenant's endpoints for status events")
async def list_webhooks(request: Request, response: Response) -> WebhookList:
    door = request.app.state.door
    caller = await door.admit(request, "webhooks")
    response.headers.update(caller.limit.headers())
    return WebhookList(webhooks=[_webhook(v) for v in await door.engine.webhooks(caller.tenant)])


@router.delete(
    "/webhooks/{id}", status_code=204, summary="Remove an endpoint and its undelivered events"
)
async def remove_webhook(request: Request, id: Annotated[int, Path(ge=1, le=_MAX_ID)]) -> Response:
    door = request.app.state.door
    caller = await door.admit(request, "webhooks")
    await door.engine.webhook_remove(caller.tenant, id)
    return Response(status_code=204, headers=caller.limit.headers())


@router.post(
    "/webhooks/{id}/rotate-secret",
    summary="A new signing secret; the old one signs as well for 24 hours",
)
async def rotate_webhook_secret(
    request: Request, response: Response, id: Annotated[int, Path(ge=1, le=_MAX_ID)]
) -> WebhookCreated:
    door = request.app.state.door
    caller = await door.admit(request, "webhooks")
    response.headers.update(caller.limit.headers())
    made = await door.engine.webhook_secret_rotate(caller.tenant, id)
    return await _made(request, caller.tenant, made)
