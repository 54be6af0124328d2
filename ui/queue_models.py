"""Qt table models of the queue: the depth of each tenant's queue by state, and notifications
as the queue view lists them (recipients masked, errors in one line, a scheduled one's send time
and any one's deadline). Display formatting lives here, not in views."""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import Any

from PySide6.QtCore import Qt

from engine import NotificationState, NotificationView, TenantDepth
from ui.fmt import fmt_age, fmt_count, fmt_duration
from ui.record_model import Column, RecordModel
from ui.state import QueueRow
from ui.table_model import ShownModel

__all__ = ["DepthModel", "NotificationsModel"]


class DepthModel(RecordModel[TenantDepth]):
    columns = (
        Column[TenantDepth]("Tenant", lambda d: d.tenant),
        Column[TenantDepth]("Queued", lambda d: fmt_count(d.queued), lambda d: d.queued, True),
        Column[TenantDepth](
            "Scheduled", lambda d: fmt_count(d.scheduled), lambda d: d.scheduled, True
        ),
        Column[TenantDepth]("In flight", lambda d: fmt_count(d.leased), lambda d: d.leased, True),
        Column[TenantDepth](
            "Delivered", lambda d: fmt_count(d.delivered), lambda d: d.delivered, True
        ),
        Column[TenantDepth]("Dead", lambda d: fmt_count(d.dead), lambda d: d.dead, True),
        Column[TenantDepth](
            "Cancelled", lambda d: fmt_count(d.cancelled), lambda d: d.cancelled, True
        ),
        Column[TenantDepth]("Expired", lambda d: fmt_count(d.expired), lambda d: d.expired, True),
        Column[TenantDepth](
            "Oldest queued",
            lambda d: fmt_duration(d.oldest_queued_age_s),
            lambda d: d.oldest_queued_age_s or 0.0,
            True,
            "How long the oldest notification still queued has waited.",
        ),
    )

    def key(self, row: TenantDepth) -> Hashable:
        return row.tenant


# -- notifications ---------------------------------------------------------------------------


class NotificationsModel(ShownModel[QueueRow]):
    """Notifications as people may see them: recipients masked, errors in one line; the
    filter searches tenant, provider, recipient (masked), state and error."""

    columns = (
        Column[QueueRow]("ID", lambda r: str(r.view.id), lambda r: r.view.id, True),
        Column[QueueRow]("Tenant", lambda r: r.tenant),
        Column[QueueRow]("Provider", lambda r: r.provider),
        Column[QueueRow]("Recipient", lambda r: r.view.recipient_masked),
        Column[QueueRow]("State", lambda r: r.view.state.value),
        Column[QueueRow](
            "Attempts",
            lambda r: f"{r.view.attempt} / {r.view.max_attempts}",
            lambda r: r.view.attempt,
            True,
        ),
        Column[QueueRow](
            "Enqueued", lambda r: fmt_age(r.view.enqueued_at), lambda r: -r.view.enqueued_at, True
        ),
        Column[QueueRow]("Last error", lambda r: _first_line(r.view.last_error)),
        Column[QueueRow]("Time and deadline", lambda r: _lifetime(r.view)),
    )

    def key(self, row: QueueRow) -> Hashable:
        return row.view.id

    def text_for_filter(self, row: QueueRow) -> str:
        v = row.view
        return f"{v.id} {row.tenant} {row.provider} {v.recipient_masked} {v.state} {v.last_error}"

    def role_data(self, record: QueueRow, column: int, role: int) -> Any:
        if role == Qt.ItemDataRole.ToolTipRole and column == 7 and record.view.last_error:
            return record.view.last_error
        return None

    def ids(self, rows: Sequence[int]) -> list[int]:
        return [self._rows[r].view.id for r in rows if 0 <= r < len(self._rows)]


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def _lifetime(view: NotificationView, now: float | None = None) -> str:
    """A scheduled notification's send time and any notification's deadline, from ``now``:
    ``sends in 2 h 5 min; expires in 2 h 10 min``; empty when it has neither."""
    now = time.time() if now is None else now
    said = []
    if view.state is NotificationState.SCHEDULED:
        said.append(f"sends in {fmt_duration(max(0.0, view.available_at - now))}")
    if view.expires_at is not None:
        left = view.expires_at - now
        said.append(f"expires in {fmt_duration(left)}" if left > 0 else "deadline passed")
    return "; ".join(said)
