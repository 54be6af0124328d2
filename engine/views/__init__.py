"""What the console, the metrics and the progress lines read: the telemetry a dispatcher records,
the bounded record of recent sends, and snapshots through a view whose cost does not grow with
the tenants.
"""

__all__ = ["activity", "glance", "glance_model", "telemetry"]
