"""The main window: dispatch controls, the views in tabs, the log, the status bar."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QLabel,
    QMainWindow,
    QSpinBox,
    QStyle,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from engine import EngineState, TenantRecord
from ui.bridge import Bridge
from ui.fmt import fmt_count
from ui.settings import ConsoleSettings, save_settings, window_state
from ui.state import Status
from ui.theme import Theme, app_icon, apply_theme
from ui.views.api_keys import ApiKeysView
from ui.views.circuits import CircuitBanner
from ui.views.dashboard import Dashboard
from ui.views.log import LogPanel
from ui.views.providers import ProvidersView
from ui.views.queue import QueueView
from ui.views.settings import SettingsDialog
from ui.views.simulator import SimulatorView
from ui.views.store import StoreView
from ui.views.suppressions import SuppressionsView
from ui.views.tenants import TenantsView
from ui.views.webhooks import WebhooksView
from ui.views.workers import WorkersView
from ui.widgets import MessageBar

__all__ = ["MainWindow"]

_STATE_COLOURS: dict[str, str] = {
    EngineState.RUNNING: "#3a9d5d",
    EngineState.PAUSED: "#e0a030",
    EngineState.FAILED: "#d64545",
}


class MainWindow(QMainWindow):
    """Built from parts passed in: the bridge, where settings are kept, and the settings."""

    closing = Signal()  # the operator closed the window; the composition root stops the engine

    def __init__(
        self,
        bridge: Bridge,
        settings_store: QSettings,
        settings: ConsoleSettings | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.settings_store = settings_store
        self.settings = settings or ConsoleSettings()
        self.setWindowTitle("OmniPost console")
        self.setWindowIcon(app_icon())
        self.setObjectName("OmniPostConsole")
        self._offered_demo = False
        self._settings_dialog: SettingsDialog | None = None

        self.bar = MessageBar()
        self.circuits = CircuitBanner(bridge.circuit_close)
        self.dashboard = Dashboard(bridge)
        self.tenants_view = TenantsView(bridge)
        self.providers_view = ProvidersView(bridge)
        self.simulator = SimulatorView(bridge)
        self.queue_view = QueueView(bridge)
        self.workers_view = WorkersView(bridge)
        self.store_view = StoreView(bridge)
        self.api_keys_view = ApiKeysView(bridge)
        self.suppressions_view = SuppressionsView(bridge)
        self.webhooks_view = WebhooksView(bridge)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        for view, title in self.views():
            self.tabs.addTab(view, title)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 0)
        layout.addWidget(self.bar)
        layout.addWidget(self.circuits)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self.log_panel = LogPanel(bridge)
        self.log_dock = QDockWidget("Log", self)
        self.log_dock.setObjectName("LogDock")
        self.log_dock.setWidget(self.log_panel)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.log_dock)

        self._actions()
        self._status_bar()
        self._connect()
        self.theme = self.follow_system_theme()
        self._restore()

    def views(self) -> list[tuple[QWidget, str]]:
        return [
            (self.dashboard, "Dashboard"),
            (self.tenants_view, "Tenants && limits"),
            (self.providers_view, "Providers"),
            (self.simulator, "Burst simulator"),
            (self.queue_view, "Queue && dead letters"),
            (self.workers_view, "Workers"),
            (self.store_view, "Store && retention"),
            (self.api_keys_view, "API keys"),
            (self.suppressions_view, "Suppressions"),
            (self.webhooks_view, "Webhooks"),
        ]

    # -- actions and shortcuts -------------------------------------------------------------

    def _action(self, text: str, shortcut: str, slot: object, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.setToolTip(f"{tip or text} ({shortcut})" if shortcut else tip or text)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _actions(self) -> None:
        style = self.style()
        icon = style.standardIcon
        self.start_action = self._action("Start", "Ctrl+Return", self.bridge.start, "Dispatch")
        self.start_action.setIcon(icon(QStyle.StandardPixmap.SP_MediaPlay))
        self.pause_action = self._action("Pause", "Ctrl+P", self.bridge.pause, "Take no new work")
        self.pause_action.setIcon(icon(QStyle.StandardPixmap.SP_MediaPause))
        self.stop_action = self._action(
            "Stop", "Ctrl+.", self.bridge.stop, "Stop and return unsent leases"
        )
        self.stop_action.setIcon(icon(QStyle.StandardPixmap.SP_MediaStop))
        self.refresh_action = self._action("Refresh", "F5", self.bridge.refresh, "Read all now")
        self.refresh_action.setIcon(icon(QStyle.StandardPixmap.SP_BrowserReload))
        self.live_action = self._action(
            "Pause live view", "Ctrl+Space", self._toggle_live, "Freeze the plots"
        )
        self.settings_action = self._action("Settings…", "Ctrl+,", self.show_settings)
        self.quit_action = self._action("Quit", "Ctrl+Q", self.close)
        self.log_action = self.log_dock.toggleViewAction()
        self.log_action.setShortcut(QKeySequence("Ctrl+L"))
        self.addAction(self.log_action)

        self.concurrency = QSpinBox()
        self.concurrency.setRange(1, 1024)
        self.concurrency.setValue(self.bridge.engine.concurrency)
        self.concurrency.setPrefix("concurrency ")
        self.concurrency.setToolTip("Sends this console's engine makes at once.")
        self.concurrency.valueChanged.connect(self.bridge.concurrency_set)

        toolbar = QToolBar("Dispatch")
        toolbar.setObjectName("DispatchToolbar")
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for action in (self.start_action, self.pause_action, self.stop_action):
            toolbar.addAction(action)
        toolbar.addWidget(self.concurrency)
        toolbar.addSeparator()
        toolbar.addAction(self.refresh_action)
        self.addToolBar(toolbar)

        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        file_menu.addAction(self.settings_action)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        dispatch = menu.addMenu("&Dispatch")
        for action in (self.start_action, self.pause_action, self.stop_action):
            dispatch.addAction(action)
        view = menu.addMenu("&View")
        for index, (_, title) in enumerate(self.views()):
            action = self._action(
                title.replace("&&", "&"), f"Ctrl+{index + 1}", self._show_tab(index)
            )
            view.addAction(action)
        view.addSeparator()
        view.addAction(self.log_action)
        view.addAction(self.live_action)
        view.addAction(self.refresh_action)

    def _show_tab(self, index: int) -> object:
        return lambda: self.tabs.setCurrentIndex(index)

    def _toggle_live(self) -> None:
        paused = not self.dashboard.paused
        self.dashboard.set_paused(paused)
        self.live_action.setText("Resume live view" if paused else "Pause live view")

    # -- status bar ------------------------------------------------------------------------

    def _status_bar(self) -> None:
        bar = self.statusBar()
        self.state_label = QLabel()
        self.store_label = QLabel()
        self.limiter_label = QLabel()
        self.lag_label = QLabel()
        self.workers_label = QLabel()
        self.totals_label = QLabel()
        for label in (
            self.state_label,
            self.store_label,
            self.limiter_label,
            self.lag_label,
            self.workers_label,
            self.totals_label,
        ):
            bar.addPermanentWidget(label)
        self.lag_label.setToolTip("How late the event loop runs: the console's smoothness.")
        self.show_status(
            Status(
                store=self.bridge.engine.store_url,
                limiter_backend=self.bridge.engine.limiter_backend,
                state=self.bridge.engine.state,
                loop_lag_ms=0,
                workers=0,
                totals=self.bridge.engine.totals(),
            )
        )

    def show_status(self, status: Status) -> None:
        colour = _STATE_COLOURS.get(status.state, "#8a8f98")
        self.state_label.setText(f"<b style='color:{colour}'>● {status.state}</b>")
        self.store_label.setText(f"store {status.store}")
        self.limiter_label.setText(f"limiter {status.limiter_backend}")
        self.lag_label.setText(f"loop lag {status.loop_lag_ms} ms")
        self.workers_label.setText(f"{status.workers} worker{'s' if status.workers != 1 else ''}")
        t = status.totals
        self.totals_label.setText(
            f"delivered {fmt_count(t.delivered)} · throttled {fmt_count(t.throttled)} · "
            f"retried {fmt_count(t.failed)} · dead {fmt_count(t.dead)}"
            + (f" · held {fmt_count(t.held)}" if t.held else "")
        )
        if status.failure:
            self.bar.tell(f"The engine stopped: {status.failure}", "error")

    # -- wiring ----------------------------------------------------------------------------

    def _connect(self) -> None:
        bridge = self.bridge
        bridge.status_changed.connect(self.show_status)
        bridge.sampled.connect(lambda snap: self.circuits.show_circuits(snap.health))
        bridge.state_changed.connect(self.show_state)
        bridge.error.connect(self.show_error)
        bridge.notice.connect(lambda text: self.statusBar().showMessage(text, 6000))
        bridge.tenants_changed.connect(self._maybe_offer_demo)
        hints = QGuiApplication.styleHints()
        hints.colorSchemeChanged.connect(lambda _scheme: self.follow_system_theme())
        self.show_state(bridge.engine.state)

    def show_state(self, state: str) -> None:
        running = state == EngineState.RUNNING
        paused = state == EngineState.PAUSED
        self.start_action.setEnabled(not running)
        self.start_action.setText("Resume" if paused else "Start")
        self.pause_action.setEnabled(running)
        self.stop_action.setEnabled(running or paused)

    def show_error(self, sentence: str) -> None:
        self.bar.tell(sentence, "error", timeout_ms=12_000)
        self.statusBar().showMessage(sentence, 12_000)

    def _maybe_offer_demo(self, tenants: list[TenantRecord]) -> None:
        if tenants or self._offered_demo or not self.bridge.can_seed_demo:
            return
        self._offered_demo = True
        self.bar.offer(
            "This store has no tenants yet. Set up a demo (five tenants, three simulated "
            "providers with different rates and failures) to see the console at work?",
            "Set up demo",
            self.bridge.seed_demo,
        )

    def follow_system_theme(self, dark: bool | None = None) -> Theme:
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        self.theme = apply_theme(app, dark)
        self.dashboard.apply_theme(self.theme)
        self.simulator.apply_theme(self.theme)
        return self.theme

    # -- settings and window state ---------------------------------------------------------

    def show_settings(self) -> None:
        if self._settings_dialog is None:
            self._settings_dialog = SettingsDialog(self.settings, self)
            self._settings_dialog.applied.connect(self.apply_settings)
        self._settings_dialog.load(self.settings)
        self._settings_dialog.show()  # not exec(): the console keeps running
        self._settings_dialog.raise_()

    def apply_settings(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        save_settings(self.settings_store, settings)
        self.bridge.set_interval(settings.refresh_ms, settings.history_s)
        self.statusBar().showMessage(
            f"refreshing every {settings.refresh_ms} ms, keeping {settings.history_s} s", 5000
        )

    def _restore(self) -> None:
        geometry, state = window_state(self.settings_store)
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(1400, 900)
        if state is None or not self.restoreState(state):
            self.resizeDocks([self.log_dock], [190], Qt.Orientation.Vertical)
        index = self.settings_store.value("window/tab", 0)
        self.tabs.setCurrentIndex(int(str(index)) if str(index).isdigit() else 0)

    def save_window_state(self) -> None:
        self.settings_store.setValue("window/geometry", self.saveGeometry())
        self.settings_store.setValue("window/state", self.saveState())
        self.settings_store.setValue("window/tab", self.tabs.currentIndex())
        self.settings_store.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_window_state()
        if self._settings_dialog is not None:
            self._settings_dialog.close()
        event.accept()
        self.closing.emit()
