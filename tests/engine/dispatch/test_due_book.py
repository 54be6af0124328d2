"""The dispatcher's book of keys (engine/dispatch/due.py): each key in one place, at fixed
instants."""

from __future__ import annotations

import pytest

from engine.dispatch.due import DueBook, Pair
from engine.store import DuePair

A1, B1, C1, A2, B2 = (1, 1), (2, 1), (3, 1), (1, 2), (2, 2)


def lines(book: DueBook) -> dict[int, list[Pair]]:
    return {provider: list(line) for provider, line in book.lines()}


def served_in_turn(book: DueBook, provider: int, visits: int) -> list[Pair]:
    """The keys a provider's line serves first, ``visits`` times, one row each."""
    order = []
    for _ in range(visits):
        key = next(line for p, line in book.lines() if p == provider)[0]
        order.append(key)
        book.served(key, 1, drained=False)
    return order


def test_added_keys_are_served_in_turn_per_provider() -> None:
    book = DueBook(cap=1024)
    for key in (A1, B1, A2, C1):
        book.add(key, 5)
    assert lines(book) == {1: [A1, B1, C1], 2: [A2]}
    assert served_in_turn(book, 1, 6) == [A1, B1, C1, A1, B1, C1]
    assert book.due[A1] == 3


def test_adding_to_a_known_key_keeps_its_place() -> None:
    book = DueBook(cap=1024)
    book.add(A1, 1)
    book.add(B1, 1)
    book.add(A1, 4)
    assert lines(book) == {1: [A1, B1]} and book.due[A1] == 5


@pytest.mark.parametrize(
    ("leased", "drained", "line", "probes"),
    [
        (2, False, [B1, A1], set()),  # rows left: to the back
        (5, False, [B1], set()),  # its exact count ran out: forgotten, not probed
        (1, True, [B1], {A1}),  # the claim found fewer than it asked: looked at alone
    ],
)
def test_served(leased: int, drained: bool, line: list[Pair], probes: set[Pair]) -> None:
    book = DueBook(cap=1024)
    book.add(A1, 5)
    book.add(B1, 5)
    book.served(A1, leased, drained=drained)
    assert lines(book) == {1: line}
    assert book.probes == probes
    assert (A1 in book.due) == (A1 in line)


def test_a_capped_count_that_runs_out_is_looked_at_alone_an_exact_one_is_not() -> None:
    book = DueBook(cap=4)
    book.begin_look()
    book.look({A1: 9, B1: 4, C1: 3})  # A1 and B1 at the cap: maybe more; C1 exact
    assert book.due == {A1: 4, B1: 4, C1: 3}
    for key in (A1, B1, C1):
        book.served(key, book.due[key], drained=False)
    assert book.probes == {A1, B1} and not book.due
    book.begin_look()
    book.look({A1: 5, B1: 4, C1: 3})  # the next look brings the exact one back
    assert book.due == {C1: 3}


def test_a_waiting_key_is_not_in_its_line_until_its_instant_then_goes_first() -> None:
    book = DueBook(cap=1024)
    for key in (A1, B1, C1):
        book.add(key, 5)
    book.wait(A1, until=10.0)
    assert lines(book) == {1: [B1, C1]}
    assert book.next_wait_s(mono=4.0, wall=0.0) == 6.0
    book.wake(mono=9.999, wall=0.0)
    assert lines(book) == {1: [B1, C1]}
    book.wake(mono=10.0, wall=0.0)
    assert lines(book) == {1: [A1, B1, C1]}  # its own tokens are there: it goes first
    assert book.next_wait_s(mono=10.0, wall=0.0) is None


def test_a_held_provider_holds_its_line_and_a_waiting_key_waits_for_the_later() -> None:
    book = DueBook(cap=1024)
    book.add(A1, 5)
    book.add(B1, 5)
    book.add(A2, 5)
    book.wait(B1, until=3.0)  # its tenant's bucket refills at 3
    book.hold_provider(1, until=8.0)  # the provider's at 8
    assert book.held_for_s(1, mono=2.0) == 6.0 and book.held_for_s(2, mono=2.0) == 0.0
    assert book.has_ready(mono=2.0)  # provider 2's line is not held
    book.served(A2, 5, drained=False)
    assert not book.has_ready(mono=2.0)
    # Woken at 3, B1 would find its provider still empty: both wait until 8.
    assert book.next_wait_s(mono=2.0, wall=0.0) == 6.0
    book.wake(mono=8.0, wall=0.0)
    # A1 waited for the provider in its place; B1 joins the line behind it, not in front: a
    # key whose own bucket refills often does not take every token of a contended provider.
    assert lines(book)[1] == [A1, B1] and book.held_for_s(1, mono=8.0) == 0.0


def test_keys_woken_while_their_provider_is_free_go_first_and_held_ones_last() -> None:
    book = DueBook(cap=1024)
    for key in (A1, B1, C1, A2, B2):
        book.add(key, 5)
    book.wait(C1, until=3.0)
    book.wait(B2, until=3.0)
    book.hold_provider(2, until=5.0)  # provider 2's line waits; provider 1's does not
    book.wake(mono=3.0, wall=0.0)
    assert lines(book) == {1: [C1, A1, B1], 2: [A2, B2]}


def test_a_drained_key_probed_with_later_rows_is_parked_until_they_fall_due() -> None:
    book = DueBook(cap=1024)
    book.add(A1, 1)
    book.served(A1, 1, drained=True)
    book.begin_probe()
    book.probed([A1], [DuePair(1, 1, 0, 500.0, 3)])
    assert len(book) == 0 and not book.probes and lines(book) == {}
    assert book.next_wait_s(mono=0.0, wall=100.0) == 400.0
    book.wake(mono=0.0, wall=500.0)
    assert lines(book) == {1: [A1]}


@pytest.mark.parametrize(
    ("found", "ready", "parked_until"),
    [
        ([], [], None),  # nothing queued: forgotten
        ([DuePair(1, 1, 7, 0.0, 7)], [A1], None),  # due rows: ready again
        ([DuePair(1, 1, 0, 50.0, 1)], [], 50.0),  # only later rows: parked until then
    ],
)
def test_probed(found: list[DuePair], ready: list[Pair], parked_until: float | None) -> None:
    book = DueBook(cap=1024)
    book.add(A1, 1)
    book.served(A1, 1, drained=True)
    book.begin_probe()
    book.probed([A1], found)
    assert lines(book).get(1, []) == ready
    assert book.next_wait_s(mono=0.0, wall=0.0) == parked_until
    assert not book.probes


def test_a_key_added_while_its_probe_is_under_way_keeps_what_the_add_said() -> None:
    book = DueBook(cap=1024)
    book.add(A1, 1)
    book.served(A1, 1, drained=True)
    book.begin_probe()
    book.add(A1, 2)  # an enqueue committed after the probe read the store
    book.probed([A1], [])
    assert lines(book) == {1: [A1]} and book.due[A1] == 2


def test_a_look_at_the_counts() -> None:
    book = DueBook(cap=100)
    book.add(A1, 5)  # ready
    book.add(B1, 5)  # ready, but the counts show none queued: gone
    book.later(C1, 900.0)  # parked, behind a retry
    book.begin_look()
    book.look({A1: 500, C1: 3, A2: 4})
    assert lines(book) == {1: [A1], 2: [A2]}
    assert book.due == {A1: 100, A2: 4}  # counts kept up to the cap
    book.begin_look()
    book.look({A1: 500, C1: 3, A2: 4})  # C1's count is what it was: still parked
    assert C1 not in book.due
    book.begin_look()
    book.look({A1: 500, C1: 4, A2: 4})  # a row came in for C1
    assert lines(book) == {1: [A1, C1], 2: [A2]}


def test_a_key_added_during_a_look_is_not_dropped_by_it() -> None:
    book = DueBook(cap=100)
    book.begin_look()
    book.add(A1, 1)  # enqueued after the counts were read
    book.look({})
    assert lines(book) == {1: [A1]}


def test_release_waits_puts_every_waiting_key_back() -> None:
    book = DueBook(cap=100)
    book.add(A1, 1)
    book.add(B1, 1)
    book.wait(A1, 50.0)
    book.hold_provider(1, 60.0)
    book.release_waits()
    assert lines(book) == {1: [B1, A1]}
    assert book.held_for_s(1, 0.0) == 0.0 and book.next_wait_s(0.0, 0.0) is None


def test_drop_forgets_a_key_wherever_it_is() -> None:
    book = DueBook(cap=100)
    book.add(A1, 1)
    book.add(B1, 1)
    book.drop(A1)
    book.wait(B1, 5.0)
    book.look({B1: 1})
    book.drop(B1)  # waiting, not first in any line
    assert len(book) == 0 and book.next_wait_s(0.0, 0.0) is None


def test_a_look_that_drops_many_keys_keeps_the_others_in_their_order() -> None:
    # A worker's share of the tenants changed: most keys went to others, in one look.
    book = DueBook(cap=1024)
    keys = [(tenant, provider) for tenant in range(1, 201) for provider in (1, 2)]
    for key in keys:
        book.add(key, 3)
    book.wait((4, 1), until=5.0)  # a waiting key that goes too, and one that stays
    book.wait((5, 2), until=5.0)
    kept = {key: 3 for key in keys if key[0] % 4 == 1}
    book.begin_look()
    book.look(kept)
    assert set(book.due) == set(kept)
    in_line = [key for key in keys if key in kept and key != (5, 2)]  # (5, 2) still waits
    assert lines(book) == {p: [key for key in in_line if key[1] == p] for p in (1, 2)}
    book.wake(mono=6.0, wall=0.0)  # the stale timer of the waiting key that went is ignored
    assert set(book.due) == set(kept)
    assert lines(book)[2][0] == (5, 2) and (4, 1) not in lines(book)[1]


def test_keep_forgets_the_keys_a_worker_no_longer_serves_wherever_they_are() -> None:
    book = DueBook(cap=1024)
    for key in (A1, B1, C1, A2, B2):
        book.add(key, 3)
    book.wait(B2, until=5.0)
    book.later((4, 1), at=100.0)  # parked
    book.served(C1, 3, drained=True)  # to be looked at alone
    mine = {1}  # tenant ids this worker keeps
    book.keep(lambda key, _n: key[0] in mine)
    assert set(book.due) == {A1, A2}
    assert lines(book) == {1: [A1], 2: [A2]}
    assert not book.probes
    book.wake(mono=6.0, wall=200.0)  # the stale timers of what went are ignored
    assert set(book.due) == {A1, A2}


def test_pairs_served_while_the_counts_are_read_keep_what_the_book_knows() -> None:
    """The dispatcher serves the book while the store reads the counts: the counts were read
    before those claims, so a pair drained meanwhile does not come back with rows it no longer
    has, and one with rows left keeps the book's count; the others take the look's."""
    book = DueBook(cap=1024)
    book.begin_look()
    book.look({A1: 2, B1: 3, C1: 1})
    book.begin_look()  # the read starts; the rounds go on
    book.served(A1, 2, drained=False)  # its exact count ran out: forgotten
    book.served(B1, 1, drained=False)  # two left
    book.look({A1: 2, B1: 3, C1: 4})  # read before those claims
    assert book.due == {B1: 2, C1: 4}
    book.begin_look()
    book.look({A1: 2, B1: 3, C1: 4})  # a look begun after them is believed again
    assert book.due == {A1: 2, B1: 3, C1: 4}


def test_a_retry_written_while_the_counts_are_read_waits_for_its_time() -> None:
    """A row delayed (a retry's back-off) while the counts are read, of a pair the read saw
    with nothing queued (its row was leased), is not forgotten by the look: it falls due."""
    book = DueBook(cap=1024)
    book.begin_look()
    book.later(A1, at=105.0)
    book.look({})
    book.wake(mono=0.0, wall=104.0)
    assert lines(book) == {}
    book.wake(mono=0.0, wall=105.0)
    assert lines(book) == {1: [A1]}
