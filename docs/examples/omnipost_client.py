"""An example client of OmniPost's HTTP API (docs/api.md), on httpx.

Every POST carries an ``Idempotency-Key`` made once per logical request, so a retry after a
dropped connection, a timeout, a 409 (the first try still under way), a 429 or a 5xx cannot
queue a notification twice: the server answers a repeat with the first answer.

    client = OmniPost("http://127.0.0.1:8080", key="op_...")
    sent = client.send("sms", "+15550100", {"text": "hello"})
    print(client.get(sent["id"])["state"])
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

__all__ = ["OmniPost", "OmniPostError"]

_RETRY_STATUS = {409, 429, 500, 502, 503, 504}


class OmniPostError(Exception):
    """The API refused a request; ``status`` and ``problem`` (its problem+json body) say why."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        super().__init__(f"{status}: {problem.get('detail', 'the request failed.')}")
        self.status = status
        self.problem = dict(problem)


class OmniPost:
    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout_s: float = 10.0,
        attempts: int = 6,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout_s,
            transport=transport,
        )
        self._attempts = attempts

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OmniPost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the calls --------------------------------------------------------------------------

    def send(
        self,
        provider: str,
        recipient: str,
        payload: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Queue one notification; returns ``{"id", "state", "duplicate", ...}``."""
        body = _item(provider, recipient, payload, key, priority)
        return self._call("POST", "/v1/notifications", body, idempotency_key or _new_key())

    def send_batch(
        self, items: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Queue up to 1,000 notifications (each a dict as ``send`` takes), all or none."""
        body = {"notifications": list(items)}
        answer = self._call("POST", "/v1/notifications", body, idempotency_key or _new_key())
        return list(answer["notifications"])

    def get(self, notification_id: int) -> dict[str, Any]:
        return self._call("GET", f"/v1/notifications/{notification_id}")

    def cancel(self, notification_id: int) -> dict[str, Any]:
        answer = self._call("POST", f"/v1/notifications/{notification_id}/cancel")
        return dict(answer["notification"])

    def notifications(
        self, *, state: str | None = None, provider: str | None = None, page: int = 100
    ) -> Iterator[dict[str, Any]]:
        """Every notification of the tenant, newest first, page by page along the cursor."""
        params: dict[str, Any] = {"limit": page}
        if state:
            params["state"] = state
        if provider:
            params["provider"] = provider
        while True:
            answer = self._call("GET", "/v1/notifications", params=params)
            yield from answer["notifications"]
            if not answer["next_cursor"]:
                return
            params["cursor"] = answer["next_cursor"]

    def limits(self) -> dict[str, Any]:
        return self._call("GET", "/v1/limits")

    # -- retries ----------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        idempotency_key: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        for attempt in range(self._attempts):
            last = attempt == self._attempts - 1
            try:
                answer = self._http.request(method, path, json=body, params=params, headers=headers)
            except httpx.TransportError:
                # The request may or may not have arrived: the same key makes trying again safe
                # (for a POST without one, it is not: this client always sends one).
                if last:
                    raise
                time.sleep(_backoff(attempt))
                continue
            if answer.status_code in _RETRY_STATUS and not last:
                time.sleep(_retry_after(answer) or _backoff(attempt))
                continue
            if answer.is_error:
                raise OmniPostError(answer.status_code, _problem(answer))
            return dict(answer.json())
        raise AssertionError("unreachable")  # the last attempt returns or raises


def _item(
    provider: str,
    recipient: str,
    payload: Mapping[str, Any] | None,
    key: str | None,
    priority: int,
) -> dict[str, Any]:
    item: dict[str, Any] = {"provider": provider, "recipient": recipient}
    if payload:
        item["payload"] = dict(payload)
    if key:
        item["key"] = key
    if priority:
        item["priority"] = priority
    return item


def _new_key() -> str:
    return uuid.uuid4().hex


def _backoff(attempt: int) -> float:
    """Full jitter: up to 0.1 s, 0.2 s, 0.4 s... (at most 5 s)."""
    return random.uniform(0, min(5.0, 0.1 * 2**attempt))


def _retry_after(answer: httpx.Response) -> float:
    try:
        return min(30.0, float(answer.headers.get("Retry-After", "")))
    except ValueError:
        return 0.0


def _problem(answer: httpx.Response) -> dict[str, Any]:
    try:
        return dict(answer.json())
    except ValueError:
        return {"detail": answer.text[:200]}
