"""The burst simulator: enqueue a pattern of notifications and watch it drain, with the time
the configured rates predict beside the time it took; or, in its what-if mode
(``ui.views.whatif``), plan the same burst with proposed limits beside the current ones."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import BurstTraffic, Pattern, ProviderRecord, TenantRecord
from ui.bridge import Bridge
from ui.fmt import fmt_duration
from ui.simulation import SimulationStatus
from ui.theme import Theme
from ui.views.whatif import WhatIfPanel

__all__ = ["SimulatorView"]

_TICKED_AT_FIRST = 20

PATTERN_HELP = {
    Pattern.SPIKE: "all at once",
    Pattern.STEADY: "evenly over the duration",
    Pattern.RAMP: "arrivals speed up over the duration",
    Pattern.POISSON: "random arrivals at the mean rate",
}


class SimulatorView(QWidget):
    def __init__(self, bridge: Bridge, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._build()
        bridge.tenants_changed.connect(self.set_tenants)
        bridge.providers_changed.connect(self.set_providers)
        bridge.simulation_changed.connect(self.show_status)

    def _build(self) -> None:
        self.tenants = QListWidget()
        self.tenants.setToolTip("Each ticked tenant gets the whole count.")
        self.tenants.setMaximumHeight(120)  # the modes below need the height more
        self.provider = QComboBox()
        self.pattern = QComboBox()
        for pattern in Pattern:
            self.pattern.addItem(f"{pattern.value} — {PATTERN_HELP[pattern]}", pattern.value)
        self.pattern.currentIndexChanged.connect(self._pattern_changed)
        self.count = QSpinBox()
        self.count.setRange(1, 1_000_000)
        self.count.setValue(500)
        self.count.setSuffix(" per tenant")
        self.duration = QDoubleSpinBox()
        self.duration.setRange(0, 3600)
        self.duration.setValue(10)
        self.duration.setSuffix(" s")
        form = QFormLayout()
        form.addRow("Provider", self.provider)
        form.addRow("Pattern", self.pattern)
        form.addRow("Count", self.count)
        form.addRow("Duration", self.duration)
        self.ttl = QDoubleSpinBox()
        self.ttl.setRange(0, 86_400)
        self.ttl.setValue(0)
        self.ttl.setSuffix(" s")
        self.ttl.setSpecialValueText("none")
        self.ttl.setToolTip(
            "Each notification's deadline, after it is enqueued: past it, it is never sent and "
            "ends expired (the dashboard counts them; the what-if says how many would)."
        )
        form.addRow("TTL", self.ttl)
        setup = QGroupBox("Burst")
        setup_layout = QHBoxLayout(setup)
        tenants = QVBoxLayout()
        tenants.addWidget(QLabel("Tenants"))
        tenants.addWidget(self.tenants)
        setup_layout.addLayout(tenants, 1)
        setup_layout.addLayout(form, 2)
        self.whatif = WhatIfPanel(self.bridge, self.burst_traffic)
        for signal in (
            self.tenants.itemChanged,
            self.provider.currentIndexChanged,
            self.pattern.currentIndexChanged,
            self.count.valueChanged,
            self.duration.valueChanged,
            self.ttl.valueChanged,
        ):
            signal.connect(self.whatif.inputs_changed)
        self.modes = QTabWidget()
        self.modes.addTab(self._live(), "Live burst")
        self.modes.addTab(self.whatif, "What if…")
        layout = QVBoxLayout(self)
        layout.addWidget(setup)
        layout.addWidget(self.modes, 1)
        self._pattern_changed()

    def _live(self) -> QWidget:
        self.start_button = QPushButton("Start burst")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop enqueueing")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.bridge.stop_simulation)
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        note = QLabel(
            "The prediction assumes full buckets at the start and counts neither provider "
            "latency nor concurrency, so the actual time is usually a little longer. Watch the "
            "gauges and queues move on the dashboard. The what-if mode plans the same burst "
            "with the dispatcher itself, without sending anything."
        )
        note.setWordWrap(True)
        live = QWidget()
        layout = QVBoxLayout(live)
        layout.addLayout(buttons)
        layout.addWidget(self._outcome_box())
        layout.addWidget(note)
        layout.addStretch(1)
        return live

    def _outcome_box(self) -> QGroupBox:
        self.progress = QProgressBar()
        self.progress.setFormat("%v of %m enqueued")
        self.progress.setValue(0)
        self.predicted = QLabel("—")
        self.actual = QLabel("—")
        self.bottleneck = QLabel("")
        self.bottleneck.setWordWrap(True)
        self.running = QLabel("No burst yet.")
        self.running.setWordWrap(True)
        for label in (self.predicted, self.actual):
            font = label.font()
            font.setPointSizeF(font.pointSizeF() * 1.5)
            font.setBold(True)
            label.setFont(font)
        outcome = QGroupBox("Drain time")
        grid = QFormLayout(outcome)
        grid.addRow(self.running)
        grid.addRow(self.progress)
        grid.addRow("Predicted from the configured rates", self.predicted)
        grid.addRow("Actual", self.actual)
        grid.addRow(self.bottleneck)
        return outcome

    def _pattern_changed(self) -> None:
        self.duration.setEnabled(self.pattern.currentData() != Pattern.SPIKE.value)

    def set_tenants(self, tenants: list[TenantRecord]) -> None:
        """List the tenants to burst: while every one listed is ticked, up to
        ``_TICKED_AT_FIRST`` of them, new ones are ticked too; an unchanged list is left as
        it is (10,000 items take a while to make)."""
        names = [t.name for t in tenants]
        if names == [self.tenants.item(i).text() for i in range(self.tenants.count())]:
            return
        ticked = set(self.selected_tenants())
        every = len(ticked) == self.tenants.count()  # new ones join a list all ticked
        first = every and len(tenants) <= _TICKED_AT_FIRST
        self.tenants.clear()
        for tenant in tenants:
            item = QListWidgetItem(tenant.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            on = tenant.name in ticked or first
            item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
            self.tenants.addItem(item)

    def set_providers(self, providers: list[ProviderRecord]) -> None:
        current = self.provider.currentText()
        self.provider.clear()
        self.provider.addItems([p.name for p in providers])
        if current:
            self.provider.setCurrentText(current)

    def apply_theme(self, theme: Theme) -> None:
        self.whatif.apply_theme(theme)

    def burst_traffic(self) -> BurstTraffic:
        """The burst the inputs describe, for planning."""
        return BurstTraffic(
            tuple(self.selected_tenants()),
            self.provider.currentText(),
            self.count.value(),
            Pattern(self.pattern.currentData()),
            self.duration.value() if self.duration.isEnabled() else 0.0,
            self.ttl_s(),
        )

    def ttl_s(self) -> float | None:
        """The TTL field's seconds; None when it says none."""
        return self.ttl.value() or None

    def selected_tenants(self) -> list[str]:
        items = (self.tenants.item(i) for i in range(self.tenants.count()))
        return [i.text() for i in items if i.checkState() == Qt.CheckState.Checked]

    def start(self) -> None:
        self.bridge.simulate(
            self.selected_tenants(),
            self.provider.currentText(),
            self.count.value(),
            str(self.pattern.currentData()),
            self.duration.value() if self.duration.isEnabled() else 0.0,
            self.ttl_s(),
        )

    def show_status(self, status: SimulationStatus) -> None:
        self.progress.setMaximum(max(1, status.total))
        self.progress.setValue(status.enqueued)
        running = not status.done
        # A new burst may start once this one is queued (it may never drain: a paused engine).
        self.start_button.setEnabled(not (running and status.enqueuing))
        self.stop_button.setEnabled(running and status.enqueuing)
        verb = "Enqueueing" if status.enqueuing and running else "Burst"
        self.running.setText(
            f"{verb}: {status.total // max(1, len(status.tenants)):,} each for "
            f"{', '.join(status.tenants)} through {status.provider}."
        )
        forecast = status.forecast
        self.predicted.setText("—" if forecast is None else fmt_duration(forecast.seconds))
        if forecast is not None:
            self.bottleneck.setText(f"The pace is set by {forecast.bottleneck}.")
        if status.actual_s is not None:
            self.actual.setText(fmt_duration(status.actual_s))
        elif status.stopped:
            self.actual.setText(f"stopped after {fmt_duration(status.elapsed_s)}")
        else:
            self.actual.setText(f"{fmt_duration(status.elapsed_s)} so far…")
