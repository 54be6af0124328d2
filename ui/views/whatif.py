"""The burst simulator's what-if mode: propose limits beside the ones in force, plan the burst
(or the backlog) with both, compare each tenant's predicted queue, then apply or discard.

What is proposed, what may be applied and what to draw are decided by ``ui.whatif.WhatIf``;
this module shows it. Plans run on the engine's worker thread through the bridge, so the
console keeps running while one is under way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine import BacklogTraffic, BurstTraffic, ConfigError, LimitChange, PlanReport, WorkerRecord
from ui.bridge import Bridge
from ui.theme import LIGHT, Theme
from ui.whatif import (
    PlanRequest,
    PlanTraffic,
    WhatIf,
    compare,
    curves,
    live_concurrency,
    summary,
)
from ui.whatif_models import ComparisonModel, ProposalsModel

__all__ = ["WhatIfPanel"]

_LEGEND_COLUMNS = 6


class WhatIfPanel(QWidget):
    """The what-if mode. ``burst`` reads the simulator's burst inputs; call ``inputs_changed``
    when they change, so a plan of other inputs can no longer be applied."""

    def __init__(
        self, bridge: Bridge, burst: Callable[[], BurstTraffic], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._burst = burst
        self.state = WhatIf()
        self._asked: PlanRequest | None = None  # the plan under way
        self._busy = False  # a plan or an apply under way
        self._error_shown = False
        self._theme = LIGHT
        self._live_concurrency = bridge.engine.concurrency
        self._stale = True  # the rows wait for the view to be shown
        self.model = ProposalsModel(self.state, self)
        self.model.edited.connect(self.inputs_changed)
        self.comparison = ComparisonModel(self)
        self._build()
        for signal in (bridge.tenants_changed, bridge.providers_changed, bridge.limits_changed):
            signal.connect(self._reload_rows)
        bridge.workers_changed.connect(self._workers)
        bridge.planned.connect(self._planned)
        bridge.plan_failed.connect(self._failed)
        bridge.limits_applied.connect(self._applied)
        self._reload_rows()

    # -- layout ----------------------------------------------------------------------------

    def _build(self) -> None:
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._inputs())
        splitter.addWidget(self._results())
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

    def _inputs(self) -> QWidget:
        self.table = QTableView()
        self.table.setModel(self.model)
        _compact(self.table)
        self.table.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.AnyKeyPressed
        )
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.concurrency = QSpinBox()
        self.concurrency.setRange(0, 1024)
        self.concurrency.setSpecialValueText("as now")
        self.concurrency.setToolTip(
            "Sends at once in the proposed plan; only planned, never applied."
        )
        self.concurrency.valueChanged.connect(self.inputs_changed)
        self.concurrency_now = QLabel()
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        hint = QLabel(
            "Double-click a Proposed cell to change it: empty stays as it is, 'none' removes "
            "the limit."
        )
        hint.setWordWrap(True)

        concurrency = QHBoxLayout()
        concurrency.addWidget(QLabel("Concurrency"))
        concurrency.addWidget(self.concurrency)
        concurrency.addWidget(self.concurrency_now, 1)
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 4, 0)
        layout.addWidget(hint)
        layout.addWidget(self.table, 1)
        layout.addLayout(concurrency)
        layout.addLayout(self._buttons())
        layout.addWidget(self.message)
        return box

    def _buttons(self) -> QHBoxLayout:
        self.plan_button = QPushButton("Plan the burst")
        self.plan_button.setToolTip(
            "Plan the burst set above with the current and proposed limits."
        )
        self.plan_button.clicked.connect(self.plan_burst)
        self.backlog_button = QPushButton("Plan the backlog")
        self.backlog_button.setToolTip("Plan what the store holds queued now, all due at once.")
        self.backlog_button.clicked.connect(self.plan_backlog)
        self.apply_button = QPushButton("Apply proposed limits")
        self.apply_button.clicked.connect(self.apply)
        self.discard_button = QPushButton("Discard")
        self.discard_button.clicked.connect(self.discard)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # no known end: it moves while a plan runs
        self.busy.setTextVisible(False)
        self.busy.setMaximumWidth(90)
        self.busy.hide()
        row = QHBoxLayout()
        for button in (self.plan_button, self.backlog_button):
            row.addWidget(button)
        row.addWidget(self.busy)
        row.addStretch(1)
        row.addWidget(self.apply_button)
        row.addWidget(self.discard_button)
        return row

    def _results(self) -> QWidget:
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMinimumHeight(180)
        item = self.plot.getPlotItem()
        item.setTitle("Predicted queue: solid now, dashed as proposed")
        item.showGrid(x=True, y=True, alpha=0.2)
        item.setLabel("left", "queued")
        item.setLabel("bottom", "seconds from the start")
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        self.legend = item.addLegend(offset=(-8, 4))
        self.results = QTableView()
        self.results.setModel(self.comparison)
        _compact(self.results)
        header = self.results.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.summary = QLabel("Propose limits on the left, then plan.")
        self.summary.setWordWrap(True)
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(4, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(self.plot, 3)
        layout.addWidget(self.results, 2)
        self.apply_theme(self._theme)
        return box

    def apply_theme(self, theme: Theme) -> None:
        self._theme = theme
        self.plot.setBackground(theme.background)
        item = self.plot.getPlotItem()
        for axis in ("left", "bottom"):
            item.getAxis(axis).setPen(pg.mkPen(theme.grid))
            item.getAxis(axis).setTextPen(pg.mkPen(theme.muted))
        item.titleLabel.setText(item.titleLabel.text, color=theme.text)
        backdrop = QColor(theme.background)
        backdrop.setAlpha(235)
        self.legend.setBrush(pg.mkBrush(backdrop))
        self.legend.setLabelTextColor(theme.text)
        self._show_plan()

    # -- data in ---------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._stale:
            self._reload_rows()

    def _reload_rows(self, *_: object) -> None:
        """Every limit as a row to propose against: made when the view is shown (a
        configuration of 400,000 limits changes while another view is shown, not remade)."""
        self._stale = not self.isVisible()
        if self._stale:
            return
        bridge = self.bridge
        self.state.set_limits(
            [t.name for t in bridge.tenants], [p.name for p in bridge.providers], bridge.limits
        )
        self.model.refresh()
        self.inputs_changed()

    def _workers(self, workers: list[WorkerRecord]) -> None:
        self._live_concurrency = live_concurrency(workers, self.bridge.engine.concurrency)
        self._show_concurrency()

    def _show_concurrency(self) -> None:
        shown = self.state.shown
        now = shown[1].current.concurrency if shown is not None else self._live_concurrency
        self.concurrency_now.setText(f"now {now}")

    # -- planning --------------------------------------------------------------------------

    def proposed_concurrency(self) -> int | None:
        return self.concurrency.value() or None

    def plan_burst(self) -> None:
        self._plan(self._burst)

    def plan_backlog(self) -> None:
        self._plan(BacklogTraffic)

    def _plan(self, traffic: Callable[[], PlanTraffic]) -> None:
        try:
            request = self.state.request(traffic(), self.proposed_concurrency())
        except ConfigError as exc:
            self.say(exc.message, error=True)
            return
        self._asked = request
        self._set_busy(f"Planning {request.traffic}…")
        self.bridge.plan(request.traffic, request.changes, request.concurrency)

    def _planned(self, report: PlanReport) -> None:
        asked, self._asked = self._asked, None
        if asked is None:
            return  # not this panel's plan
        self.state.planned(asked, report)
        self._set_busy(None)
        self.say(f"Planned in {report.current.planned_in_s + _proposed_s(report):.1f} s.")
        self._show_plan()

    def _failed(self, sentence: str) -> None:
        self._asked = None
        self._set_busy(None)
        self.say(sentence[:1].upper() + sentence[1:], error=True)

    def apply(self) -> None:
        if self.state.shown is None or not self.state.can_apply(self.current_request()):
            return
        self._set_busy("Applying the proposed limits…")
        self.bridge.apply_limits(self.state.shown[0].changes)

    def _applied(self, changes: tuple[LimitChange, ...]) -> None:
        unapplied = " The concurrency is only planned: set it on the workers." * bool(
            self.concurrency.value()
        )
        self.state.clear()
        self.concurrency.setValue(0)
        self._set_busy(None)
        self.model.refresh()
        self._show_plan()
        self.say(
            f"Applied {', '.join(str(c) for c in changes)} to the store and every engine "
            f"(in the audit log). Plan again to see them as the current limits.{unapplied}"
        )

    def discard(self) -> None:
        self.state.discard()
        self.concurrency.setValue(0)
        self.model.refresh()
        self._show_plan()
        self.say("Proposed limits discarded.")

    # -- showing ---------------------------------------------------------------------------

    def current_request(self) -> PlanRequest | None:
        """What the inputs ask now, of the same traffic as the plan on screen."""
        shown = self.state.shown
        if shown is None:
            return None
        backlog = isinstance(shown[0].traffic, BacklogTraffic)
        try:
            traffic = BacklogTraffic() if backlog else self._burst()
            return self.state.request(traffic, self.proposed_concurrency())
        except ConfigError:
            return None

    def inputs_changed(self) -> None:
        problems = self.state.problems()
        if problems:
            self.say(next(iter(problems.values())), error=True)
        elif self._error_shown:
            self.say("")
        self._update_buttons()

    def _set_busy(self, doing: str | None) -> None:
        """Say what is under way (None: nothing) and allow no other step meanwhile."""
        self._busy = doing is not None
        self.busy.setVisible(self._busy)
        for button in (self.plan_button, self.backlog_button, self.discard_button):
            button.setEnabled(not self._busy)
        if doing is not None:
            self.say(doing)
        self._update_buttons()

    def _update_buttons(self) -> None:
        can_apply = not self._busy and self.state.can_apply(self.current_request())
        self.apply_button.setEnabled(can_apply)
        self.apply_button.setToolTip(
            "Apply the proposed limits to the store and every engine (audited)."
            if can_apply
            else "Plan exactly these inputs with a proposed limit first."
        )

    def say(self, text: str, *, error: bool = False) -> None:
        self._error_shown = error and bool(text)
        self.message.setText(text)
        self.message.setStyleSheet("color: #d64545;" if self._error_shown else "")

    def _show_plan(self) -> None:
        """Draw the plan on screen (or none): the curves, the comparison, the summary."""
        self._show_concurrency()
        self._update_buttons()
        item = self.plot.getPlotItem()
        self.legend.clear()
        item.clear()
        shown = self.state.shown
        if shown is None:
            self.comparison.set_rows([])
            self.summary.setText("Propose limits on the left, then plan.")
            return
        report = shown[1]
        drawn = curves(report)
        tenants = len({c.tenant for c in drawn})
        columns = max(1, min(tenants, _LEGEND_COLUMNS))
        self.legend.setColumnCount(columns)
        for curve in drawn:
            style = Qt.PenStyle.DashLine if curve.proposed else Qt.PenStyle.SolidLine
            pen = pg.mkPen(self._theme.series(curve.colour), width=2, style=style)
            name = None if curve.proposed else curve.tenant  # the title tells dashes apart
            item.plot(np.asarray(curve.t_s), np.asarray(curve.queued), pen=pen, name=name)
        # Headroom above the highest queue for the legend's rows, so it hides no curve.
        highest = max((max(c.queued, default=0) for c in drawn), default=0) or 1
        end_s = max((max(c.t_s, default=0.0) for c in drawn), default=0.0) or 1.0
        rows = -(-tenants // columns)
        item.setRange(xRange=(0, end_s), yRange=(0, highest * (1.1 + 0.12 * rows)), padding=0)
        self.comparison.set_rows(compare(report))
        self.summary.setText(summary(report))


def _compact(table: QTableView) -> None:
    """No row numbers, and rows one line of text high: the mode shows a lot at once."""
    rows = table.verticalHeader()
    rows.hide()
    rows.setDefaultSectionSize(table.fontMetrics().height() + 8)


def _proposed_s(report: PlanReport) -> float:
    return report.proposed.planned_in_s if report.proposed is not None else 0.0
