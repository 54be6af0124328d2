"""The packaged app (``make dist``): its one executable runs the CLI on both stores, reaches
Redis, webhook and SMTP servers, carries the package's version, and passes its own self-test.

Every test skips, before any fixture runs, while ``dist/omnipost/omnipost`` is missing or older
than the sources; with ``OMNIPOST_REQUIRE_FROZEN`` set (CI, after ``make dist``) they fail
instead. Commands run as processes with a clean environment, as an operator would run them.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from engine.providers import verify_signature
from testkit.cli import REPO
from testkit.servers import MailServer, Reply, Request, ScriptedServer

BUNDLE = REPO / "dist" / "omnipost"
FROZEN = BUNDLE / "omnipost"
REQUIRED = bool(os.environ.get("OMNIPOST_REQUIRE_FROZEN"))
SOURCES = ("api", "app", "engine", "ui")
BUILT_FROM = {".py", ".lua", ".mako"}  # and omnipost.spec
TIMEOUT_S = 120.0
SECRET = "frozen-signing-key"


def _not_runnable() -> str | None:
    """Why the built app cannot be tested now, or None when it can."""
    if not FROZEN.is_file():
        return f"the packaged app is not built ({FROZEN.relative_to(REPO)}; run `make dist`)"
    built = FROZEN.stat().st_mtime
    files = [p for d in SOURCES for p in (REPO / d).rglob("*") if p.suffix in BUILT_FROM]
    newer = [p for p in [REPO / "omnipost.spec", *files] if p.stat().st_mtime > built]
    if newer:
        name = newer[0].relative_to(REPO)
        return f"the packaged app is older than {name} and {len(newer) - 1} more; run `make dist`"
    return None


WHY_NOT = _not_runnable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(WHY_NOT is not None and not REQUIRED, reason=str(WHY_NOT)),
]


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    if WHY_NOT is not None:  # only reached with OMNIPOST_REQUIRE_FROZEN set
        pytest.fail(f"{WHY_NOT}, and OMNIPOST_REQUIRE_FROZEN is set")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: no OMNIPOST_* from outside, a home of its own, offscreen Qt."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMNIPOST_", "PYTHON"))}
    return base | {
        "OMNIPOST_HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "QT_QPA_PLATFORM": "offscreen",
    }


class Frozen:
    """``frozen("stats", "--json")`` runs ``dist/omnipost/omnipost stats --json --db URL``."""

    def __init__(self, env: dict[str, str], db_url: str | None = None) -> None:
        self.env = env
        self.db_url = db_url

    def argv(self, args: tuple[str, ...]) -> list[str]:
        db = ["--db", self.db_url] if self.db_url else []
        return [str(FROZEN), *args, *db]

    def __call__(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(args),
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=TIMEOUT_S,
            check=False,
        )

    def ok(self, *args: str, stdin: str = "") -> str:
        done = self(*args, stdin=stdin)
        assert done.returncode == 0, f"omnipost {' '.join(args)} -> {done.returncode}: {done}"
        assert "Traceback" not in done.stderr, done.stderr
        return done.stdout

    async def run_async(self, *args: str) -> tuple[int, str, str]:
        """For tests whose servers live on the test's own loop."""
        proc = await asyncio.create_subprocess_exec(
            *self.argv(args),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'frozen.db'}"


def test_the_bundle_carries_the_package_version() -> None:
    version = importlib.metadata.version("omnipost")
    assert list(BUNDLE.glob(f"_internal/omnipost-{version}.dist-info/METADATA"))


def test_a_bad_store_url_is_one_sentence(env: dict[str, str]) -> None:
    done = Frozen(env, "mysql://nowhere/db")("stats")
    assert done.returncode == 2
    assert done.stderr.startswith("omnipost: ") and "Traceback" not in done.stderr


def test_the_cli_migrates_enqueues_and_drains_on_both_stores(
    store_url: str, env: dict[str, str], tmp_path: Path
) -> None:
    frozen = Frozen(env, store_url)
    out = tmp_path / "deliveries.jsonl"
    head = ScriptDirectory(str(REPO / "engine" / "store" / "migrations")).get_current_head()
    assert frozen.ok("migrate").endswith(f"is at revision {head}\n")  # every revision shipped
    frozen.ok("tenant", "add", "acme", "--rate", "200", "--burst", "20")
    frozen.ok("tenant", "add", "globex")
    frozen.ok("provider", "add", "out", "--kind", "file", "--option", f"path={out}")
    frozen.ok("enqueue", "acme", "out", "alice@example.com", "--payload", '{"n": 0}')
    lines = [
        json.dumps({"tenant": t, "provider": "out", "recipient": f"u{n}@example.com"})
        for t in ("acme", "globex")
        for n in range(20)
    ]
    frozen.ok("enqueue", "--file", "-", stdin="\n".join(lines) + "\n")
    frozen.ok("worker", "--until-empty", "--quiet")

    stats = json.loads(frozen.ok("stats", "--json"))
    depth = {row["tenant"]: row for row in stats["depth"]}
    assert (depth["acme"]["delivered"], depth["acme"]["queued"]) == (21, 0)
    assert (depth["globex"]["delivered"], depth["globex"]["queued"]) == (20, 0)
    delivered = [json.loads(line) for line in out.read_text().splitlines()]
    assert len({d["notification_id"] for d in delivered}) == 41


@pytest.mark.redis
async def test_the_worker_shares_its_buckets_through_redis(
    sqlite_url: str, env: dict[str, str], tmp_path: Path
) -> None:
    from testkit.redis_limiters import REDIS_URL, delete_prefix, redis_client_or_skip

    client = await redis_client_or_skip()
    frozen = Frozen(env, sqlite_url)
    tenant = f"frozen-{uuid.uuid4().hex[:8]}"  # the CLI's key prefix is fixed; the tenant is not
    base = f"omnipost:{{t:{tenant}}}"
    out = tmp_path / "deliveries.jsonl"
    try:
        for args in (
            ("migrate",),
            ("tenant", "add", tenant, "--rate", "100"),
            ("provider", "add", "out", "--kind", "file", "--option", f"path={out}"),
            ("enqueue", tenant, "out", "bob@example.com"),
            ("worker", "--until-empty", "--quiet", "--redis", REDIS_URL),
        ):
            code, _, err = await frozen.run_async(*args)
            assert code == 0, err
        # The Lua scripts were found in the bundle: the tenant's bucket (one hash) is in Redis.
        assert await client.hget(f"{base}:tenant", "rate") is not None
        assert len(out.read_text().splitlines()) == 1
    finally:
        await delete_prefix(client, base)
        members = [m async for m in client.sscan_iter("omnipost:buckets:v2") if tenant in str(m)]
        if members:
            await client.srem("omnipost:buckets:v2", *members)
        await client.aclose()


async def test_webhook_and_smtp_providers_reach_local_servers(
    sqlite_url: str, env: dict[str, str]
) -> None:
    seen: list[Request] = []

    def receive(request: Request) -> Reply:
        seen.append(request)
        signature = request.headers.get("omnipost-signature", "")
        return Reply(200 if verify_signature(SECRET, signature, request.body) else 401)

    frozen = Frozen(env, sqlite_url)
    async with ScriptedServer({"/hook": [receive]}) as http, MailServer() as mail:
        setup = [
            ("migrate",),
            ("provider", "add", "hook", "--kind", "webhook", "--option", f"url={http.url('/hook')}",
             "--secret", f"signing_key={SECRET}"),
            ("provider", "add", "mail", "--kind", "smtp", "--option", "host=127.0.0.1",
             "--option", f"port={mail.port}", "--option", "security=none",
             "--option", "from=ops@example.com"),
        ]  # fmt: skip
        for args in setup:
            code, _, err = await frozen.run_async(*args)
            assert code == 0, err
        for name in ("hook", "mail"):
            code, out, err = await frozen.run_async("provider", "test", name, "bob@example.com")
            assert (code, err) == (0, ""), out
            assert ": delivered" in out
    assert seen[0].headers["user-agent"] == f"OmniPost/{importlib.metadata.version('omnipost')}"
    assert [m["To"] for m in mail.mailbox.received] == ["bob@example.com"]


def test_the_console_passes_its_self_test_offscreen(env: dict[str, str], tmp_path: Path) -> None:
    shot = tmp_path / "console.png"
    done = Frozen(env)("self-test", "--screenshot", str(shot))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("omnipost self-test passed"), done.stdout
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_api_serves_and_stops_cleanly(
    sqlite_url: str, env: dict[str, str], tmp_path: Path, workers: str
) -> None:
    """``omnipost serve`` in the bundle: uvicorn's modules and the app factory its worker
    processes load by name are there, and a SIGTERM stops them all with exit 0."""
    import signal
    import time

    import httpx

    from testkit.redis_server import free_port

    frozen = Frozen(env, sqlite_url)
    frozen.ok("migrate")
    frozen.ok("tenant", "add", "acme")
    frozen.ok("provider", "add", "sim", "--kind", "simulated")
    key = json.loads(frozen.ok("apikey", "create", "acme", "--json"))["key"]
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            frozen.argv(("serve", "--port", str(port), "--workers", workers)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        sent = httpx.post(
            f"http://127.0.0.1:{port}/v1/notifications",
            json={"provider": "sim", "recipient": "ada@example.com"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert sent.status_code == 202, sent.text
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()
