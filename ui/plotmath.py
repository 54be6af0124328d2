"""Arithmetic behind the dashboard's plots: axis limits, smoothing, peaks. No Qt."""

from __future__ import annotations

import math

import numpy as np

from ui.history import Array

__all__ = ["moving_mean", "nice", "peak"]


def nice(value: float) -> float:
    """The smallest of 1, 1.5, 2, 3, 5, 7.5, 10, 15... at least ``value`` (and at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    steps = (1, 1.5, 2, 3, 5, 7.5, 10)
    return float(next(step * power for step in steps if step * power >= value))


def moving_mean(y: Array, width: int) -> Array:
    """The mean of each value and the ``width - 1`` before it, NaN-aware; ``y`` itself for 1."""
    if width <= 1 or y.size == 0:
        return y
    valid = ~np.isnan(y)
    sums = np.convolve(np.where(valid, y, 0.0), np.ones(width), mode="full")[: y.size]
    counts = np.convolve(valid.astype(float), np.ones(width), mode="full")[: y.size]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums / counts
    mean[~valid] = np.nan  # keep gaps where the bucket did not exist
    return mean


def peak(y: Array) -> float:
    if y.size == 0 or np.isnan(y).all():
        return 0.0
    value = float(np.nanmax(y))
    return value if math.isfinite(value) else 0.0
