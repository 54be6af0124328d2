"""The engine's key rotation: every stored secret re-encrypted under the newest key, so that an
old key can be retired once no row needs it."""

from __future__ import annotations

import logging

from engine.core.errors import ConfigError, OmniPostError
from engine.facade.parts import EngineParts
from engine.store.rotation import Progress, RotationReport

__all__ = ["RotationPart"]

log = logging.getLogger("engine.facade.engine")

DEFAULT_BATCH = 500


class RotationPart(EngineParts):
    async def keys_rotate(
        self,
        *,
        dry_run: bool = False,
        batch: int = DEFAULT_BATCH,
        progress: Progress | None = None,
    ) -> RotationReport:
        """Re-encrypt every recipient and provider secret not yet under the newest key, in
        batches of ``batch`` rows, each its own transaction; safe while workers run, safe to
        interrupt and run again (a second run rewrites nothing). Audited.

        Every row is checked first, reading only: with ``dry_run`` that check is the report
        (rows that would be rewritten, and ``problem`` naming a row no key reads); otherwise a
        row no key reads raises OmniPostError naming it before anything is written. A row of
        such a key that appears during the rewrite stops it at that row's batch, none of which
        is written. Works on an engine that was not opened: opening builds the providers, whose
        secrets may be what no key reads. Raises StoreError when the store is not migrated."""
        if batch < 1:
            raise ConfigError("the batch size must be at least 1.")
        await self.store.ensure_current()
        repo = self.store.rotation.batched(batch)
        checked = await repo.walk(rewrite=False, progress=progress)
        if dry_run:
            return checked
        if checked.problem is not None:
            raise OmniPostError(checked.problem)
        report = await repo.walk(rewrite=True, progress=progress)
        detail = {t.table: t.rewritten for t in report.tables}
        await self.store.audit.write(
            self.actor, "keys.rotate", None, {"rewritten": detail}, now=self.clock.wall()
        )
        log.info("keys rotated: %d rows rewritten under the newest key", report.rewritten)
        return report
