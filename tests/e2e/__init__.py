"""Whole runs: real providers' protocols end to end, faults and crashes, many workers, the packaged
app.
"""
