"""``command``: a console action as an ``asyncSlot`` whose errors become one sentence for
people (on ``Sampler.error`` and the log panel), never a traceback in a dialog."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import qasync

from engine import OmniPostError
from ui.sampler import Sampler

__all__ = ["command"]

log = logging.getLogger("ui.bridge")

P = ParamSpec("P")
S = TypeVar("S", bound=Sampler)


def command(
    fn: Callable[Concatenate[S, P], Coroutine[Any, Any, None]],
) -> Callable[Concatenate[S, P], asyncio.Task[None]]:
    """Make ``fn`` an ``asyncSlot`` whose errors become one sentence on ``Sampler.error``. Once
    the bridge is closing, a call (a view's timer firing late) starts nothing."""

    @functools.wraps(fn)
    async def guarded(self: S, *args: P.args, **kwargs: P.kwargs) -> None:
        self.keep_task(asyncio.current_task())  # the bridge's close waits for it
        try:
            await fn(self, *args, **kwargs)
        except OmniPostError as exc:
            self.report_error(exc.message)
        except Exception as exc:  # one sentence for people; the log has the traceback
            log.exception("console command %s failed", fn.__name__)
            action = fn.__name__.strip("_").replace("_", " ")
            self.report_error(f"{action} failed unexpectedly ({type(exc).__name__}); see the log.")

    slot = qasync.asyncSlot()(guarded)

    @functools.wraps(fn)
    def call(self: S, *args: P.args, **kwargs: P.kwargs) -> asyncio.Task[None] | None:
        if self.closing:
            return None
        return cast("asyncio.Task[None]", slot(self, *args, **kwargs))

    return cast("Callable[Concatenate[S, P], asyncio.Task[None]]", call)
