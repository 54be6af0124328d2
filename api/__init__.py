"""OmniPost's HTTP front door: a FastAPI application over an ``engine.Engine``, reaching the
engine through its public names only. ``create_app(engine)`` makes it; ``app.serve`` runs it
on uvicorn (``omnipost serve``, ``omnipost worker --serve``, ``omnipost console --serve``)."""

from api.app import create_app
from api.auth import ApiSettings
from api.metrics import ApiMetrics

__all__ = ["ApiMetrics", "ApiSettings", "create_app"]
