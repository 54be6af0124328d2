"""What the console, the metrics and the progress lines read: the figures a dispatcher records
(``figures``), the bounded record of recent sends (``activity``), and snapshots through a view
(``snapshot_view``: what a view asks for and the bounded answers; ``snapshots``: the reads
behind them), whose cost does not grow with the tenants.
"""
