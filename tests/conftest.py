"""Shared fixtures: stores on SQLite and on Postgres, engines over them.

Tests marked ``postgres`` skip with a reason when no server answers, except under CI (the
``CI`` environment variable set), where they fail instead.
"""

from __future__ import annotations

import os

# Qt has no screen here and in CI; set before anything imports PySide6.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engine import (
    BUILTIN_KINDS,
    DispatcherSettings,
    Engine,
    EngineSettings,
    FakeClock,
    LocalLimiter,
    SecretBox,
    Store,
    SystemClock,
)
from testkit.cli import Cli
from testkit.scripted import Script
from testkit.stores import BACKENDS, EngineFactory, drop_pg_database, make_pg_database
from testkit.virtual_time import VirtualEngines


@pytest.fixture
def box() -> SecretBox:
    return SecretBox([SecretBox.generate_key()])


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty store, once on SQLite and once on Postgres."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'omnipost.db'}"
        return
    url = make_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
async def store(store_url: str, box: SecretBox) -> AsyncIterator[Store]:
    """A migrated, empty store."""
    async with Store(store_url, box) as s:
        await s.migrate()
        yield s


@pytest.fixture
async def make_engine(store: Store) -> AsyncIterator[EngineFactory]:
    """Builds engines on the test's store; every one is closed at the end of the test."""
    engines: list[Engine] = []

    async def build(concurrency: int = 16, **dispatch: object) -> Engine:
        settings = EngineSettings(
            dispatch=DispatcherSettings(concurrency=concurrency, **dispatch)  # type: ignore[arg-type]
        )
        engine = Engine(store, LocalLimiter(SystemClock()), BUILTIN_KINDS, settings=settings)
        await engine.open()
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        await engine.close()


@pytest.fixture
def cli(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    """``omnipost ... --db STORE`` with its data directory in ``tmp_path``, on a migrated store
    (a test module may define its own ``cli``)."""
    monkeypatch.setenv("OMNIPOST_HOME", str(tmp_path))
    monkeypatch.delenv("OMNIPOST_DB", raising=False)
    monkeypatch.delenv("OMNIPOST_KEYS", raising=False)
    run = Cli(capsys, store_url)
    run.ok("migrate")
    return run


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh Postgres database of the test's own, dropped after it (skips without a server,
    fails under CI)."""
    url = make_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


# -- virtual time: the dispatcher's tests on a FakeClock ------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    """Virtual time that jumps to the next deadline whenever every task waits on it."""
    return FakeClock(autojump=True)


@pytest.fixture
def script(clock: FakeClock) -> Script:
    """A provider kind whose outcomes a test scripts, on ``clock``."""
    return Script(clock)


@pytest.fixture
async def engines(store: Store, clock: FakeClock, script: Script) -> AsyncIterator[VirtualEngines]:
    """Opens engines with the 'scripted' kind on virtual time; closes them all at the end (a
    test module may define its own)."""
    opened = VirtualEngines(store, clock, {"scripted": script.provider})
    yield opened
    await opened.close()
