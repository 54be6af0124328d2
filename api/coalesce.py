"""Group commit for the API's enqueues: the requests that arrive while one write is under way
go to the store together in the next, one transaction per tenant, instead of one each.

A store writes one transaction at a time (SQLite has one writer; a Postgres commit waits for its
WAL flush), and a request's transaction holds the writer from its start until this loop has
seen it end: under load, mostly waiting for the loop. Taken together, the requests of one round
share that cost. Each request still gets its own results, in its own order, as
``Engine.enqueue_many`` gives them: the rows of all go in one call, in arrival order, so a key
that two requests use is new for the first and a duplicate for the second, as it would be one
after the other. When a shared call fails (a row the engine refuses), every request of it is
tried again alone, so each gets its own answer and none is lost or written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine import Engine, EnqueueItem, EnqueueResult, StoreError

__all__ = ["MAX_ROWS", "ROUND_ROWS", "Coalescer"]

log = logging.getLogger(__name__)

MAX_ROWS = 5000  # rows of one tenant in one transaction
ROUND_ROWS = 500  # rows a Postgres writer takes at once (see Coalescer.round_rows)


@dataclass
class _Ask:
    tenant: str
    rows: Sequence[EnqueueItem]
    answer: asyncio.Future[list[EnqueueResult]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Coalescer:
    """``await coalescer.enqueue(tenant, rows)``: ``Engine.enqueue_many``, group-committed."""

    def __init__(
        self,
        engine: Engine,
        *,
        writers: int = 1,
        max_rows: int = MAX_ROWS,
        round_rows: int | None = None,
    ) -> None:
        self.engine = engine
        self.max_rows = max_rows
        # Rows a writer takes at once (whole requests; at least one): with several writers, a
        # round no bigger than this leaves the rest waiting to the next free writer, so the
        # store's connections and this loop work side by side instead of one big round at a time.
        self.round_rows = max_rows if round_rows is None else round_rows
        self.writers = writers  # rounds written at once: 1 on SQLite (one writer), more on Postgres
        self._waiting: list[_Ask] = []
        self._writing: set[asyncio.Task[None]] = set()
        self.rounds = 0  # transactions written (for the benchmarks)

    async def enqueue(self, tenant: str, rows: Sequence[EnqueueItem]) -> list[EnqueueResult]:
        ask = _Ask(tenant, rows)
        self._waiting.append(ask)
        if len(self._writing) < self.writers:
            self._start()
        return await ask.answer  # a caller that goes away cancels it; its rows are written

    def _start(self) -> None:
        task = asyncio.ensure_future(self._write())
        self._writing.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A writer ended; requests that came after its last look need another (or, when it
        was cancelled, the server is stopping: they fail rather than wait for good)."""
        self._writing.discard(task)
        if not self._waiting or len(self._writing) >= self.writers:
            return
        if task.cancelled():
            waiting, self._waiting = self._waiting, []
            for ask in waiting:
                _fail(ask)
        else:
            self._start()

    async def aclose(self) -> None:
        for task in list(self._writing):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _write(self) -> None:
        round_: list[_Ask] = []
        try:
            while self._waiting:
                round_, self._waiting = _cut(self._waiting, self.round_rows)
                if self._waiting and len(self._writing) < self.writers:
                    self._start()  # the rest goes to another writer at once, not after this one
                by_tenant: dict[str, list[_Ask]] = {}
                for ask in round_:
                    by_tenant.setdefault(ask.tenant, []).append(ask)
                await asyncio.gather(*(self._tenant(t, asks) for t, asks in by_tenant.items()))
        finally:  # cancelled mid-round (the server stops): its requests fail, not wait
            for ask in round_:
                _fail(ask)

    async def _tenant(self, tenant: str, asks: list[_Ask]) -> None:
        group: list[_Ask] = []
        size = 0
        for ask in asks:
            if group and size + len(ask.rows) > self.max_rows:
                await self._together(tenant, group)
                group, size = [], 0
            group.append(ask)
            size += len(ask.rows)
        if group:
            await self._together(tenant, group)

    async def _together(self, tenant: str, asks: list[_Ask]) -> None:
        if len(asks) > 1:
            rows = [row for ask in asks for row in ask.rows]
            self.rounds += 1
            try:
                results = await self.engine.enqueue_many(tenant, rows)
            except Exception as exc:  # noqa: BLE001 - each is tried alone below, for its answer
                log.debug("a shared enqueue of %d requests failed (%s); one by one", len(asks), exc)
            else:
                start = 0
                for ask in asks:
                    _settle(ask, results[start : start + len(ask.rows)])
                    start += len(ask.rows)
                return
        for ask in asks:
            self.rounds += 1
            try:
                _settle(ask, await self.engine.enqueue_many(tenant, ask.rows))
            except Exception as exc:  # noqa: BLE001 - the request's own error, to its caller
                if not ask.answer.done():
                    ask.answer.set_exception(exc)


def _cut(waiting: list[_Ask], rows: int) -> tuple[list[_Ask], list[_Ask]]:
    """``waiting`` split after its first requests of at most ``rows`` rows together (at least
    one request, whatever its size)."""
    size = 0
    for index, ask in enumerate(waiting):
        size += len(ask.rows)
        if size > rows and index:
            return waiting[:index], waiting[index:]
    return waiting, []


def _settle(ask: _Ask, results: list[EnqueueResult]) -> None:
    if not ask.answer.done():
        ask.answer.set_result(results)


def _fail(ask: _Ask) -> None:
    if not ask.answer.done():
        ask.answer.set_exception(StoreError("the server stopped before queueing it."))
