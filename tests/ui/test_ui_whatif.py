"""The burst simulator's what-if mode: proposals as typed turned into limit changes (and the
sentences for the ones that cannot be), when a plan may be applied, what of a plan is shown;
then through the window on a real store: plan, compare, apply (audited) and discard."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit
from pytestqt.qtbot import QtBot

from engine import (
    BacklogTraffic,
    BucketKey,
    BurstTraffic,
    ConfigError,
    Limit,
    LimitChange,
    Pattern,
    PlanReport,
    PlanResult,
    TenantPlan,
    WorkerRecord,
)
from testkit.ui import OFFSCREEN_NOISE, Console, console
from ui.views.whatif import WhatIfPanel
from ui.whatif import (
    Cell,
    LimitRow,
    Proposal,
    WhatIf,
    compare,
    curves,
    fmt_paced,
    limit_rows,
    live_concurrency,
    summary,
    to_change,
)

ACME, GLOBEX = BucketKey.for_tenant("acme"), BucketKey.for_tenant("globex")
SMS, PAIR = BucketKey.for_provider("sms"), BucketKey.for_pair("acme", "sms")
LIMITS = {ACME: Limit(20, 5), SMS: Limit(60, 30), PAIR: Limit(5, 5)}
BURST = BurstTraffic(("acme", "globex"), "sms", 100)


# -- proposals into changes --------------------------------------------------------------------


def test_rows_are_tenants_then_providers_then_existing_pairs() -> None:
    rows = limit_rows(["acme", "globex"], ["sms"], LIMITS)
    assert rows == [
        LimitRow(ACME, Limit(20, 5)),
        LimitRow(GLOBEX, None),
        LimitRow(SMS, Limit(60, 30)),
        LimitRow(PAIR, Limit(5, 5)),
    ]
    assert [r.label for r in rows] == ["tenant acme", "tenant globex", "provider sms", "acme → sms"]


@pytest.mark.parametrize(
    ("current", "rate", "burst", "expected"),
    [
        (Limit(20, 5), "", "", None),  # nothing typed
        (Limit(20, 5), "50", "", LimitChange(ACME, 50.0)),  # keeps the current burst
        (Limit(20, 5), " 50 ", "100", LimitChange(ACME, 50.0, 100.0)),
        (Limit(20, 5), "300/min", "", LimitChange(ACME, 5.0)),
        (Limit(20, 5), "0.5", "", LimitChange(ACME, 0.5)),
        (Limit(20, 5), "none", "", LimitChange(ACME, None)),
        (Limit(20, 5), "Unlimited", "", LimitChange(ACME, None)),
        (Limit(20, 5), "", "40", LimitChange(ACME, 20.0, 40.0)),  # a burst alone keeps the rate
        (None, "10", "", LimitChange(ACME, 10.0)),
        (Limit(20, 5), "20", "", None),  # the same limit: no change
        (Limit(20, 5), "20", "5", None),
        (None, "none", "", None),  # removing a limit there is none of
    ],
)
def test_a_proposal_is_the_change_it_makes(
    current: Limit | None, rate: str, burst: str, expected: LimitChange | None
) -> None:
    assert to_change(LimitRow(ACME, current), Proposal(rate, burst)) == expected


@pytest.mark.parametrize(
    ("current", "rate", "burst", "sentence"),
    [
        (Limit(20, 5), "-5", "", "tenant acme: the rate must be a finite number above 0, not -5."),
        (Limit(20, 5), "0", "", "tenant acme: the rate must be a finite number above 0, not 0."),
        (Limit(20, 5), "inf", "", "tenant acme: the rate must be a finite number above 0, "
         "not inf."),
        (Limit(20, 5), "fast", "", "tenant acme: cannot read 'fast' as a rate; write N, N/s, "
         "N/min or N/h."),
        (Limit(20, 5), "50", "lots", "tenant acme: cannot read 'lots' as a burst; write a number."),
        (Limit(20, 5), "50", "0.5", "tenant acme: the burst must be a finite number of at least "
         "1, not 0.5."),
        (Limit(20, 5), "none", "5", "tenant acme: a removed limit has no burst; clear the burst."),
        (None, "", "10", "tenant acme: it has no limit to change the burst of; give a rate as "
         "well."),
    ],
)  # fmt: skip
def test_a_proposal_that_cannot_be_read_says_why_in_one_sentence(
    current: Limit | None, rate: str, burst: str, sentence: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        to_change(LimitRow(ACME, current), Proposal(rate, burst))
    assert caught.value.message == sentence


def whatif() -> WhatIf:
    state = WhatIf()
    state.set_limits(["acme", "globex"], ["sms"], LIMITS)
    return state


def test_the_changes_come_in_row_order_and_a_bad_one_stops_them() -> None:
    state = whatif()
    state.propose(SMS, rate="120", burst="60")
    state.propose(ACME, rate="50")
    state.propose(GLOBEX, burst="")  # typed and cleared again: nothing
    assert state.changes() == (LimitChange(ACME, 50.0), LimitChange(SMS, 120.0, 60.0))
    assert state.problems() == {}
    state.propose(PAIR, rate="-1")
    assert state.problems() == {
        PAIR: "acme → sms: the rate must be a finite number above 0, not -1."
    }
    with pytest.raises(ConfigError, match="acme → sms"):
        state.changes()
    state.propose(PAIR, rate="")
    assert set(state.proposals) == {ACME, SMS}


def test_proposals_of_rows_that_are_gone_are_forgotten() -> None:
    state = whatif()
    state.propose(GLOBEX, rate="5")
    state.propose(PAIR, rate="1")
    state.set_limits(["acme"], ["sms"], {ACME: Limit(20, 5)})
    assert state.proposals == {}
    assert state.changes() == ()


@pytest.mark.parametrize(
    ("traffic", "sentence"),
    [
        (BurstTraffic((), "sms", 10), "choose at least one tenant for the burst."),
        (BurstTraffic(("acme",), "", 10), "choose a provider for the burst."),
    ],
)
def test_a_burst_needs_tenants_and_a_provider(traffic: BurstTraffic, sentence: str) -> None:
    with pytest.raises(ConfigError) as caught:
        whatif().request(traffic, None)
    assert caught.value.message == sentence


def tenant(
    name: str, drain_s: float | None, p95_s: float | None, most: int, paced: str
) -> TenantPlan:
    depth = ((0.0, most), (drain_s or 60.0, 0))
    return TenantPlan(name, most, most, 0, most, drain_s, None, p95_s, None, most, paced, depth)


def result(*tenants: TenantPlan, concurrency: int = 16) -> PlanResult:
    drains = [t.drain_s for t in tenants]
    total = None if None in drains else max((d for d in drains if d is not None), default=0.0)
    unfinished = 7 if total is None else 0
    notes = sum(t.notifications for t in tenants)
    return PlanResult(concurrency, (), tenants, (), total, notes, unfinished, 0.25)


CURRENT = result(
    tenant("globex", 5.0, 2.0, 100, "arrivals"), tenant("acme", 4.75, 3.5, 100, "tenant:acme")
)
PROPOSED = result(
    tenant("acme", 2.0, 1.0, 80, "pair:acme/sms"), tenant("globex", 6.0, 2.0, 100, "arrivals")
)


def report(proposed: PlanResult | None = PROPOSED) -> PlanReport:
    changes = (LimitChange(ACME, 50.0),) if proposed is not None else ()
    return PlanReport(str(BURST), changes, CURRENT, proposed)


def test_a_plan_can_be_applied_only_for_the_inputs_it_answered() -> None:
    state = whatif()
    state.propose(ACME, rate="50")
    asked = state.request(BURST, None)
    assert not state.can_apply(asked)  # nothing planned yet
    state.planned(asked, report())
    assert state.can_apply(state.request(BURST, None))
    assert not state.can_apply(state.request(BurstTraffic(("acme", "globex"), "sms", 101), None))
    assert not state.can_apply(state.request(BURST, 8))  # another concurrency
    assert not state.can_apply(state.request(BacklogTraffic(), None))
    assert not state.can_apply(None)  # the inputs cannot be read
    state.propose(ACME, rate="60")
    assert not state.can_apply(state.request(BURST, None))
    state.propose(ACME, rate="50")
    assert state.can_apply(state.request(BURST, None))
    state.set_limits(["acme", "globex"], ["sms"], {**LIMITS, ACME: Limit(30, 5)})  # changed
    assert not state.can_apply(state.request(BURST, None))


def test_a_plan_of_concurrency_alone_has_nothing_to_apply() -> None:
    state = whatif()
    asked = state.request(BURST, 64)
    assert asked.proposes and asked.changes == ()
    state.planned(asked, report())
    assert not state.can_apply(state.request(BURST, 64))


def test_discarding_keeps_the_current_plan_and_drops_the_proposed_one() -> None:
    state = whatif()
    state.propose(ACME, rate="50")
    state.planned(state.request(BURST, None), report())
    state.discard()
    assert state.proposals == {}
    assert state.shown is not None
    request, shown = state.shown
    assert (request.changes, request.concurrency, shown.proposed) == ((), None, None)
    assert shown.current is CURRENT
    assert not state.can_apply(state.request(BURST, None))
    state.clear()
    assert repr(state) == "WhatIf(4 rows, 0 proposed, shown: none)"  # mypy keeps it narrowed


# -- what a plan shows -------------------------------------------------------------------------


def test_each_tenant_keeps_its_colour_in_both_plans() -> None:
    drawn = curves(report())
    assert [(c.tenant, c.proposed, c.colour) for c in drawn] == [
        ("acme", False, 0),
        ("acme", True, 0),
        ("globex", False, 1),
        ("globex", True, 1),
    ]
    assert (drawn[0].t_s, drawn[0].queued) == ((0.0, 4.75), (100, 0))
    assert [c.proposed for c in curves(report(None))] == [False, False]


def test_the_comparison_sets_each_figure_now_beside_the_proposed_one() -> None:
    acme, globex = compare(report())
    assert acme.tenant == "acme"
    assert acme.drain == Cell("4.8 s", "2.0 s", -1)
    assert acme.wait_p95 == Cell("3.5 s", "1.0 s", -1)
    assert acme.most_queued == Cell("100", "80", -1)
    assert acme.paced_by == Cell("tenant acme", "acme on sms", 0)
    assert str(acme.drain) == "4.8 s → 2.0 s"
    assert globex.drain == Cell("5.0 s", "6.0 s", 1)  # worse
    assert str(globex.most_queued) == "100"  # the same: said once
    assert str(globex.paced_by) == "arrivals"
    alone = compare(report(None))[0]
    assert alone.drain == Cell("4.8 s") and str(alone.drain) == "4.8 s"


def test_a_tenant_that_does_not_drain_is_worse_than_one_that_does() -> None:
    late = result(tenant("acme", None, None, 100, "tenant:acme"))
    row = compare(PlanReport("x", (), CURRENT, late))[0]
    assert row.drain == Cell("4.8 s", "not drained", 1)
    assert row.wait_p95 == Cell("3.5 s", "—", 1)


def test_the_summary_says_when_each_plan_drains() -> None:
    assert summary(report()) == (
        "A spike of 100 each for acme, globex through sms: with the current limits everything "
        "drains in 5.0 s (concurrency 16); with the proposed ones everything drains in 6.0 s "
        "(concurrency 16)."
    )
    cut = PlanReport("the store's current backlog", (), result(tenant("a", None, 1, 9, "x")), None)
    assert summary(cut) == (
        "The store's current backlog: with the current limits 7 are still queued when the plan "
        "ends (concurrency 16)."
    )
    empty = PlanReport("the store's current backlog", (), result(), None)
    assert summary(empty) == (
        "Nothing to plan: the store's current backlog holds no notifications."
    )


@pytest.mark.parametrize(
    ("paced_by", "shown"),
    [
        ("tenant:acme", "tenant acme"),
        ("provider:sms", "provider sms"),
        ("pair:acme/sms", "acme on sms"),
        ("concurrency", "concurrency"),
        ("arrivals", "arrivals"),
    ],
)
def test_what_paced_a_tenant_reads_as_words(paced_by: str, shown: str) -> None:
    assert fmt_paced(paced_by) == shown


def worker(state: str, concurrency: int) -> WorkerRecord:
    return WorkerRecord("w", "host", 1, 0.0, 0.0, state, concurrency, 0)


def test_the_concurrency_now_counts_the_live_workers_or_this_engine() -> None:
    assert live_concurrency([], 16) == 16
    live = [worker("running", 8), worker("paused", 4), worker("stopped", 100)]
    assert live_concurrency(live, 16) == 12


# -- through the window ------------------------------------------------------------------------

offscreen = pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)


def open_whatif(c: Console, count: int = 40) -> WhatIfPanel:
    assert c.window is not None
    sim = c.window.simulator
    c.window.tabs.setCurrentWidget(sim)
    sim.modes.setCurrentWidget(sim.whatif)
    c.wait(lambda: sim.provider.currentText() == "sim" and len(sim.selected_tenants()) == 2)
    c.wait(lambda: sim.whatif.model.rowCount() == 3)  # acme, globex, sim
    sim.pattern.setCurrentIndex(sim.pattern.findData(Pattern.SPIKE.value))
    sim.count.setValue(count)
    return sim.whatif


def type_proposal(c: Console, panel: WhatIfPanel, row: int, column: int, text: str) -> None:
    """Double-click-edit a cell as an operator does: type, then Return."""
    index = panel.model.index(row, column)
    panel.table.setCurrentIndex(index)
    panel.table.edit(index)
    editor = panel.table.indexWidget(index)
    assert isinstance(editor, QLineEdit)
    editor.clear()
    QTest.keyClicks(editor, text)
    QTest.keyClick(editor, Qt.Key.Key_Return)
    c.wait(lambda: panel.model.data(index) == text)


@offscreen
def test_plan_compare_and_apply_a_proposed_limit(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()  # acme 20/s burst 5, globex unlimited, provider sim
        panel = open_whatif(c)
        assert c.window is not None
        sim = c.window.simulator
        assert panel.model.data(panel.model.index(0, panel.model.CURRENT)) == "20/s burst 5"
        assert not panel.apply_button.isEnabled()
        type_proposal(c, panel, 0, panel.model.RATE, "5")

        panel.plan_button.click()
        assert panel.busy.isVisible() and not panel.plan_button.isEnabled()
        assert panel.message.text() == "Planning a spike of 40 each for acme, globex through sim…"
        c.wait(lambda: panel.state.shown is not None, 30_000)
        assert not panel.busy.isVisible() and panel.plan_button.isEnabled()

        items = panel.plot.getPlotItem().listDataItems()
        assert len(items) == 4  # two tenants, now and as proposed
        dashed = [i for i in items if i.opts["pen"].style() == Qt.PenStyle.DashLine]
        assert len(dashed) == 2
        assert [panel.legend.getLabel(i).text for i in items if i not in dashed] == [
            "acme",
            "globex",
        ]
        rows = {row.tenant: row for row in panel.comparison.rows}
        assert rows["acme"].drain.proposed is not None
        assert rows["acme"].drain.trend == 1  # 5/s drains 40 more slowly than 20/s
        assert "→" in panel.comparison.data(panel.comparison.index(0, 1))
        assert "with the proposed ones" in panel.summary.text()
        assert panel.apply_button.isEnabled()

        sim.count.setValue(41)  # other inputs: that plan no longer applies
        assert not panel.apply_button.isEnabled()
        sim.count.setValue(40)
        assert panel.apply_button.isEnabled()

        panel.apply_button.click()
        c.wait(lambda: c.run(c.engine.store.config.tenant("acme")).limit == Limit(5, 5))
        audit = c.run(c.engine.audit_entries(limit=5))
        assert (audit[0].action, audit[0].actor) == ("tenant.set", "console:test")
        c.wait(lambda: "Applied tenant:acme=5" in panel.message.text())
        c.wait(lambda: panel.model.data(panel.model.index(0, panel.model.CURRENT)) == "5/s burst 5")
        assert panel.state.proposals == {} and panel.state.shown is None
        assert panel.plot.getPlotItem().listDataItems() == []
        assert not panel.apply_button.isEnabled()
        assert c.errors == []


@offscreen
def test_discard_clears_the_proposals_and_their_curves(qtbot: QtBot, tmp_path: Path) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        panel = open_whatif(c)
        type_proposal(c, panel, 2, panel.model.RATE, "10")  # provider sim
        panel.concurrency.setValue(2)
        panel.plan_button.click()
        c.wait(lambda: panel.state.shown is not None, 30_000)
        assert len(panel.plot.getPlotItem().listDataItems()) == 4
        shown = panel.state.shown
        assert shown is not None and shown[1].proposed is not None
        assert shown[1].proposed.concurrency == 2

        panel.discard_button.click()
        assert panel.model.data(panel.model.index(2, panel.model.RATE)) == ""
        assert panel.concurrency.value() == 0 and panel.concurrency.text() == "as now"
        items = panel.plot.getPlotItem().listDataItems()
        assert len(items) == 2
        assert all(i.opts["pen"].style() == Qt.PenStyle.SolidLine for i in items)
        assert all(row.drain.proposed is None for row in panel.comparison.rows)
        assert not panel.apply_button.isEnabled()
        assert c.run(c.engine.store.config.provider("sim")).limit is None  # nothing applied

        panel.backlog_button.click()  # the store holds nothing queued
        c.wait(lambda: "backlog holds no notifications" in panel.summary.text())
        assert panel.plot.getPlotItem().listDataItems() == []
        assert panel.comparison.rowCount() == 0
        assert c.errors == []


@offscreen
def test_bad_input_and_engine_errors_show_a_sentence_in_the_view(
    qtbot: QtBot, tmp_path: Path
) -> None:
    with console(qtbot, tmp_path) as c:
        c.seed()
        panel = open_whatif(c)
        type_proposal(c, panel, 0, panel.model.RATE, "-5")
        sentence = "tenant acme: the rate must be a finite number above 0, not -5."
        assert panel.message.text() == sentence
        assert "d64545" in panel.message.styleSheet()
        index = panel.model.index(0, panel.model.RATE)
        assert panel.model.data(index, Qt.ItemDataRole.ToolTipRole) == sentence
        assert panel.model.data(index, Qt.ItemDataRole.BackgroundRole) is not None
        panel.plan_button.click()  # refused, and says why
        assert not panel.busy.isVisible() and panel.state.shown is None
        assert panel.message.text() == sentence

        type_proposal(c, panel, 0, panel.model.RATE, "fast")
        assert panel.message.text().startswith("tenant acme: cannot read 'fast' as a rate")
        type_proposal(c, panel, 0, panel.model.RATE, "")
        assert panel.message.text() == ""

        c.run(c.engine.tenant_add("initech"))
        c.run(c.bridge.reload_config())
        assert c.window is not None
        sim = c.window.simulator
        c.wait(lambda: sim.tenants.count() == 3)
        sim.tenants.item(2).setCheckState(Qt.CheckState.Checked)
        sim.count.setValue(1_000_000)  # 3 million in all: more than a plan takes
        panel.plan_button.click()
        c.wait(lambda: not panel.busy.isVisible())
        assert panel.message.text() == (
            "The burst holds more than 2,000,000 notifications; plan a smaller part of it."
        )
        assert panel.state.shown is None
        assert c.errors == ["the burst holds more than 2,000,000 notifications; plan a smaller "
                            "part of it."]  # fmt: skip
