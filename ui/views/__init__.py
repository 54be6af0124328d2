"""The console's views; each takes the ``Bridge`` and talks to nothing else."""

from ui.views.dashboard import Dashboard
from ui.views.log import LogPanel
from ui.views.providers import ProvidersView
from ui.views.queue import QueueView
from ui.views.settings import SettingsDialog
from ui.views.simulator import SimulatorView
from ui.views.store import StoreView
from ui.views.tenants import TenantsView
from ui.views.workers import WorkersView

__all__ = [
    "Dashboard",
    "LogPanel",
    "ProvidersView",
    "QueueView",
    "SettingsDialog",
    "SimulatorView",
    "StoreView",
    "TenantsView",
    "WorkersView",
]
