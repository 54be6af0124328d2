"""End to end: a real Engine dispatches through the SMTP provider to an aiosmtpd server on
127.0.0.1 that answers 421 to the first RCPT and DATA commands and 550 to one recipient.
Runs on SQLite and on Postgres (the ``store`` fixture)."""

from __future__ import annotations

from collections import Counter

from aiosmtpd.smtp import Envelope

from engine import EnqueueItem, NotificationState, NotificationView, Store
from engine.providers.smtp import message_id
from testkit.servers import MailServer, fast_engine

TENANTS = ("acme", "globex")
PER_TENANT = 15
DOMAIN = "omnipost.test"
REJECTED = "nobody@globex.example"
RCPT_421 = 3  # the first RCPT commands answered 421
DATA_421 = 2  # then the first DATA commands answered 421


def recipient(tenant: str, n: int) -> str:
    return f"user{n}@{tenant}.example"


class Relay:
    """The server's mood: busy at first (421 "try later"), and one unknown recipient."""

    def __init__(self) -> None:
        self.rcpts: Counter[str] = Counter()
        self.throttled: list[str] = []  # recipients refused with a 421
        self.stages: Counter[str] = Counter()  # 421s by command

    def rcpt(self, address: str) -> str | None:
        self.rcpts[address] += 1
        if address == REJECTED:
            return f"550 5.1.1 <{address}>: Recipient address rejected"
        if len(self.throttled) < RCPT_421:
            self.throttled.append(address)
            self.stages["RCPT"] += 1
            return "421 4.7.0 Too many connections, try again later"
        return None

    def data(self, envelope: Envelope) -> str | None:
        if len(self.throttled) < RCPT_421 + DATA_421:
            self.throttled.extend(envelope.rcpt_tos)
            self.stages["DATA"] += 1
            return "421 4.7.0 Too many messages, slow down"
        return None


async def test_every_email_is_delivered_once_through_421s_and_a_550_is_dead(
    store: Store,
) -> None:
    relay = Relay()
    # max_attempts=1: a 421 that spent an attempt (or any transient failure) would be dead.
    async with (
        MailServer() as mail,
        fast_engine(store, concurrency=4, max_attempts=1) as engine,
    ):
        mail.mailbox.rcpt_reply = relay.rcpt
        mail.mailbox.data_reply = relay.data
        options = {
            "host": "127.0.0.1",
            "port": str(mail.port),
            "security": "none",
            "from": f"OmniPost <noreply@{DOMAIN}>",
            "timeout_s": "5",
            "retry_after_s": "0.2",
        }
        await engine.provider_add("mail", "smtp", options=options)
        expected: dict[str, tuple[str, str]] = {}  # Message-ID -> (tenant, recipient)
        for tenant in TENANTS:
            await engine.tenant_add(tenant)
            items: list[EnqueueItem] = []
            for n in range(PER_TENANT):
                key = f"order.{tenant}.{n}"
                expected[message_id(tenant, key, DOMAIN)] = (tenant, recipient(tenant, n))
                payload: dict[str, object] = {"subject": f"Order {n}", "text": f"Hi {n}\n"}
                items.append(EnqueueItem("mail", recipient(tenant, n), payload, key))
            await engine.enqueue_many(tenant, items)
        await engine.enqueue("globex", "mail", REJECTED, {"subject": "x"}, key="lost")
        await engine.start()
        assert await engine.run_until_empty(timeout_s=30, poll_s=0.05)
        views: dict[str, NotificationView] = {}
        for tenant in TENANTS:
            for view in await engine.notifications(tenant, limit=1000):
                views[view.idempotency_key] = view

    # 30 emails, each received once, each with its own Message-ID derived from its key.
    received = mail.mailbox.received
    ids = Counter(str(m["Message-ID"]) for m in received)
    assert ids == Counter(dict.fromkeys(expected, 1))
    assert len(received) == len(TENANTS) * PER_TENANT
    for m in received:
        tenant, to = expected[str(m["Message-ID"])]
        assert m["To"] == to
        assert m["From"] == f"OmniPost <noreply@{DOMAIN}>"
        assert str(m["Subject"]).startswith("Order ")
    assert all(
        envelope[1] == [m["To"]]
        for envelope, m in zip(mail.mailbox.envelopes, received, strict=True)
    )

    # The 421s throttled, then the same notifications were delivered without spending an
    # attempt.
    assert relay.stages == {"RCPT": RCPT_421, "DATA": DATA_421}
    assert len(relay.throttled) == RCPT_421 + DATA_421
    # One connection reused, opened again only after each 421 closed it.
    assert 2 <= len(mail.sessions) <= 1 + RCPT_421 + DATA_421
    deliverable = {k: v for k, v in views.items() if k != "lost"}
    assert len(deliverable) == len(TENANTS) * PER_TENANT
    assert {v.state for v in deliverable.values()} == {NotificationState.DELIVERED}
    assert {v.failures for v in deliverable.values()} == {0}
    received_to = Counter(str(m["To"]) for m in received)
    assert all(received_to[address] == 1 for address in relay.throttled)

    # The refused recipient is dead after one try, with the reply as its reason.
    lost = views["lost"]
    assert lost.state is NotificationState.DEAD
    assert lost.last_error is not None
    assert lost.last_error.startswith("SMTP 550: 5.1.1")
    assert REJECTED not in lost.last_error
    assert relay.rcpts[REJECTED] == 1
