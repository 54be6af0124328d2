"""The routes of ``/v1``: queue notifications (one, or a batch all or nothing), look at them,
cancel a queued one, and read the caller's limits. Each route admits its caller first
(``api.auth``) and reaches only the caller's tenant: another tenant's id is answered exactly as
a missing one."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from pydantic_core import to_json

from api.auth import Caller, Door
from api.direct import direct_post
from api.models import (
    NAME_PATTERN,
    Batch,
    BatchAnswer,
    Cancelled,
    Incoming,
    Limits,
    NewNotification,
    Notification,
    NotificationPage,
    Queued,
    RateLimit,
    StateName,
    read_incoming,
    utc_text,
)
from api.problems import PROBLEM_JSON, ProblemError
from engine import (
    ClaimKind,
    EnqueueItem,
    EnqueueResult,
    ItemRefused,
    Limit,
    NotCancellable,
    NotificationState,
    NotificationView,
)

__all__ = ["MAX_IDEMPOTENCY_KEY", "router"]

MAX_IDEMPOTENCY_KEY = 255
MAX_ID = 2**63 - 1  # the store's ids are 64-bit
_QUEUED = NotificationState.QUEUED.value
_SUPPRESSED = NotificationState.SUPPRESSED.value
_SCHEDULED = NotificationState.SCHEDULED.value
_PROBLEM: dict[str, Any] = {
    "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"description": what, **_PROBLEM}
    for status, what in (
        (400, "Malformed JSON, or a bad Idempotency-Key header"),
        (401, "No API key, or one that is unknown or revoked"),
        (403, "The key's scope does not allow this"),
        (404, "No such notification for this tenant"),
        (409, "The notification is not queued (cancel), or its Idempotency-Key is in flight"),
        (413, "The body is over the limit"),
        (415, "The body is not JSON"),
        (422, "A field is not valid, or the Idempotency-Key was used with another body"),
        (429, "Over the key's request limit, or the tenant's queue is full"),
    )
}

router = APIRouter(prefix="/v1", responses=_ERRORS)


def _door(request: Request) -> Door:
    door: Door = request.app.state.door
    return door


def _limited(response: Response, caller: Caller) -> None:
    response.headers.update(caller.limit.headers())


async def _notification(door: Door, view: NotificationView) -> Notification:
    return Notification.of(view, door.engine.provider_name(view.provider_id))


# -- queue ----------------------------------------------------------------------------------


@direct_post(
    router,
    "/notifications",
    quick=read_incoming,
    status_code=202,
    response_model=Queued | BatchAnswer,
    summary="Queue a notification, or a batch of up to 1,000 all together",
)
async def post_notifications(
    request: Request,
    body: Annotated[Incoming, Body()],
    idempotency_key: Annotated[
        str | None,
        Header(
            description="Repeat a request safely: the same key and body answer the first "
            "answer again (with Idempotent-Replay: true). At most 255 characters."
        ),
    ] = None,
) -> Any:
    door = _door(request)
    caller = await door.admit(request, "send")
    items = body.notifications if isinstance(body, Batch) else [body]
    if idempotency_key is None:
        return _accepted(await _queue(door, caller, body, items, None), caller)
    if not 0 < len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
        raise ProblemError(
            400, f"the Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY} characters."
        )
    canonical = json.dumps(_fingerprinted(body), sort_keys=True, separators=(",", ":"))
    fingerprint = hashlib.sha256(canonical.encode()).hexdigest()
    owner = uuid.uuid4().hex
    claim = await door.engine.request_claim(
        caller.tenant, idempotency_key, fingerprint, owner=owner
    )
    if claim.kind is ClaimKind.REPLAY:
        door.metrics.refused("replayed")
        headers = {**caller.limit.headers(), "Idempotent-Replay": "true"}
        assert claim.status is not None and claim.response is not None
        return Response(
            claim.response, status_code=claim.status, headers=headers, media_type="application/json"
        )
    if claim.kind is ClaimKind.MISMATCH:
        door.metrics.refused("idempotency_mismatch")
        raise ProblemError(
            422,
            "this Idempotency-Key was used with another body; use a new key for a new request.",
            field="Idempotency-Key",
        )
    if claim.kind is ClaimKind.IN_FLIGHT:
        door.metrics.refused("in_flight")
        wait = max(1, round(claim.retry_after_s))
        raise ProblemError(
            409,
            "a request with this Idempotency-Key is still under way; try again shortly.",
            headers={"Retry-After": str(wait)},
        )
    try:
        answer = await _queue(door, caller, body, items, idempotency_key)
    except BaseException:
        await door.engine.request_abandon(caller.tenant, idempotency_key, owner=owner)
        raise
    first = (answer["notifications"][0] if "notifications" in answer else answer)["id"]
    await door.engine.request_finish(
        caller.tenant,
        idempotency_key,
        owner=owner,
        status=202,
        response=_json(answer),
        notification_id=first,
    )
    return _accepted(answer, caller)


def _fingerprinted(body: NewNotification | Batch) -> dict[str, Any]:
    """What an ``Idempotency-Key``'s fingerprint is taken of: the body with every field, but a
    notification's time fields only when given, so that a body without them has the
    fingerprint it had before they existed (a request in flight across an upgrade)."""
    dumped = body.model_dump(mode="json")
    items = dumped["notifications"] if isinstance(body, Batch) else [dumped]
    for item in items:
        for name in _LIFETIME_FIELDS:
            if item.get(name) is None:
                item.pop(name, None)
    return dumped


_LIFETIME_FIELDS = ("send_at", "expires_at", "ttl_s")


def _json(answer: dict[str, Any]) -> str:
    # pydantic-core writes these plain values as json.dumps(ensure_ascii=False, compact)
    # does, byte for byte, four times as fast (a batch's answer: 80 -> 21 us).
    return to_json(answer).decode()


def _accepted(answer: dict[str, Any], caller: Caller) -> Response:
    """The 202, written here once: the answer is built of plain values already (the route's
    ``response_model`` describes it in the OpenAPI document; checking it again per item would
    cost a batch as much as its validation)."""
    headers = caller.limit.headers()
    return Response(_json(answer), status_code=202, headers=headers, media_type="application/json")


async def _queue(
    door: Door,
    caller: Caller,
    body: NewNotification | Batch,
    items: list[NewNotification],
    idempotency_key: str | None,
) -> dict[str, Any]:
    """Queue every item in one transaction, or none: the engine refuses an item it cannot
    queue (a provider that is not configured) by its index and field, said here as a 422."""
    batch = isinstance(body, Batch)
    tenant = await door.tenant(caller.tenant)
    cap = door.max_queued(tenant)
    queued = await door.queued(caller.tenant)
    if queued + len(items) > cap:
        door.metrics.refused("queue_full")
        raise ProblemError(
            429,
            f"the tenant holds {queued:,} queued notifications and may hold {cap:,}; "
            "wait for them to be sent.",
            headers={"Retry-After": "1"},
        )
    derived = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32] if idempotency_key else None
    rows = [
        EnqueueItem(
            item.provider,
            item.recipient,
            item.payload,
            item.key or (f"http:{derived}:{index}" if derived else None),
            item.priority,
            None if item.send_at is None else item.send_at.timestamp(),
            None if item.expires_at is None else item.expires_at.timestamp(),
            item.ttl_s,
        )
        for index, item in enumerate(items)
    ]
    try:
        results = await door.coalescer.enqueue(caller.tenant, rows)
    except ItemRefused as refused:
        name = f"notifications[{refused.index}].{refused.field}" if batch else refused.field
        raise ProblemError(422, f"{name}: {refused.reason}", field=name) from None
    door.added(caller.tenant, sum(not (r.duplicate or r.suppressed) for r in results))
    answers = [_queued(item, result) for item, result in zip(items, results, strict=True)]
    for answer, result in zip(answers, results, strict=True):
        if result.duplicate:  # queued before: its state and times now
            view = await door.engine.notification(caller.tenant, result.id)
            answer["state"] = view.state.value
            if view.state is NotificationState.SCHEDULED:
                answer["send_at"] = utc_text(view.available_at)
            answer["expires_at"] = utc_text(view.expires_at)
    return {"notifications": answers} if batch else answers[0]


def _queued(item: NewNotification, result: EnqueueResult) -> dict[str, Any]:
    """One item's answer, as ``Queued`` describes it (a duplicate's state is read after)."""
    return {
        "id": result.id,
        # Suppressed: its recipient is on the tenant's suppression list.
        "state": _SUPPRESSED
        if result.suppressed
        else (_QUEUED if result.send_at is None else _SCHEDULED),
        # A key made up here (``http:``) is this request's own: its row, found again after a
        # restart, is no duplicate of another request.
        "duplicate": result.duplicate and not result.idempotency_key.startswith("http:"),
        "provider": item.provider,
        "key": item.key,
        "send_at": utc_text(result.send_at),
        "expires_at": utc_text(result.expires_at),
    }


# -- look -------------------------------------------------------------------------------------


@router.get("/notifications/{id}", summary="A notification of the caller's tenant")
async def get_notification(
    request: Request, response: Response, id: Annotated[int, Path(ge=1, le=MAX_ID)]
) -> Notification:
    door = _door(request)
    caller = await door.admit(request, "read")
    _limited(response, caller)
    return await _notification(door, await door.engine.notification(caller.tenant, id))


@router.get("/notifications", summary="The caller's notifications, newest first")
async def list_notifications(
    request: Request,
    response: Response,
    state: StateName | None = None,
    provider: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> NotificationPage:
    door = _door(request)
    caller = await door.admit(request, "read")
    _limited(response, caller)
    before = _cursor_id(cursor) if cursor is not None else None
    if provider is not None and not await door.engine.provider_known(provider):
        raise ProblemError(
            422, f"provider: there is no provider named {provider!r}.", field="provider"
        )
    views = await door.engine.notification_page(
        caller.tenant,
        state=NotificationState(state) if state is not None else None,
        provider=provider,
        before=before,
        limit=limit,
    )
    page = [await _notification(door, v) for v in views]
    more = len(views) == limit and views[-1].id > 1
    return NotificationPage(notifications=page, next_cursor=_cursor(views[-1].id) if more else None)


def _cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"before:{last_id}".encode()).decode().rstrip("=")


def _cursor_id(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, number = text.partition(":")
        if kind == "before" and number.isdigit():
            return int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise ProblemError(422, "cursor: not a cursor this API gave out.", field="cursor")


# -- cancel -----------------------------------------------------------------------------------


@router.post(
    "/notifications/{id}/cancel",
    summary="Cancel a queued notification: it is never sent",
)
async def cancel_notification(
    request: Request, response: Response, id: Annotated[int, Path(ge=1, le=MAX_ID)]
) -> Cancelled:
    door = _door(request)
    caller = await door.admit(request, "send")
    _limited(response, caller)
    try:
        view = await door.engine.notification_cancel(caller.tenant, id)
    except NotCancellable as exc:
        door.metrics.refused("not_cancellable")
        raise ProblemError(409, exc.message, extra={"state": exc.state.value}) from None
    return Cancelled(notification=await _notification(door, view))


# -- limits -----------------------------------------------------------------------------------


@router.get("/limits", summary="The caller's tenant's limits and queue")
async def limits(request: Request, response: Response) -> Limits:
    door = _door(request)
    caller = await door.admit(request, None)
    _limited(response, caller)
    found = await door.engine.tenant_limits(caller.tenant)
    tenant = await door.tenant(caller.tenant)
    return Limits(
        tenant=caller.tenant,
        dispatch=_rate_limit(found.limit),
        providers={name: _rate_limit(limit) for name, limit in found.providers.items()},
        requests=_rate_limit(tenant.api_limit or door.settings.api_limit),
        max_queued=door.max_queued(tenant),
        queued=await door.engine.queued_count(caller.tenant),
    )


def _rate_limit(limit: Limit | None) -> Any:
    return None if limit is None else RateLimit(rate_per_s=limit.rate_per_s, burst=limit.burst)
