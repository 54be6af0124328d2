"""The console's settings, kept with ``QSettings`` by the composition root and passed in."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QSettings

__all__ = ["ConsoleSettings", "load_settings", "save_settings"]

REFRESH_MS = (100, 10_000)
HISTORY_S = (30, 3600)


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    refresh_ms: int = 500
    history_s: int = 300
    dispatch_on_open: bool = True
    store_url: str = ""  # used on the next start when neither --db nor OMNIPOST_DB is given
    redis_url: str = ""  # for a shared limiter; used on the next start

    def clamped(self) -> ConsoleSettings:
        return ConsoleSettings(
            refresh_ms=min(max(self.refresh_ms, REFRESH_MS[0]), REFRESH_MS[1]),
            history_s=min(max(self.history_s, HISTORY_S[0]), HISTORY_S[1]),
            dispatch_on_open=self.dispatch_on_open,
            store_url=self.store_url.strip(),
            redis_url=self.redis_url.strip(),
        )


def _int(store: QSettings, key: str, default: int) -> int:
    value = store.value(key, default)
    try:
        return int(str(value))
    except ValueError:
        return default


def _bool(store: QSettings, key: str, default: bool) -> bool:
    value = store.value(key, default)
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")


def load_settings(store: QSettings) -> ConsoleSettings:
    defaults = ConsoleSettings()
    return ConsoleSettings(
        refresh_ms=_int(store, "console/refresh_ms", defaults.refresh_ms),
        history_s=_int(store, "console/history_s", defaults.history_s),
        dispatch_on_open=_bool(store, "console/dispatch_on_open", defaults.dispatch_on_open),
        store_url=str(store.value("console/store_url", "") or ""),
        redis_url=str(store.value("console/redis_url", "") or ""),
    ).clamped()


def save_settings(store: QSettings, settings: ConsoleSettings) -> None:
    store.setValue("console/refresh_ms", settings.refresh_ms)
    store.setValue("console/history_s", settings.history_s)
    store.setValue("console/dispatch_on_open", settings.dispatch_on_open)
    store.setValue("console/store_url", settings.store_url)
    store.setValue("console/redis_url", settings.redis_url)
    store.sync()


def window_state(store: QSettings) -> tuple[QByteArray | None, QByteArray | None]:
    geometry = store.value("window/geometry")
    state = store.value("window/state")
    return (
        geometry if isinstance(geometry, QByteArray) else None,
        state if isinstance(state, QByteArray) else None,
    )
