"""Bounded history for the live plots: named series in numpy ring buffers sharing one clock.

Each ``append`` stores one sample time and, for every series, a value or NaN when the sample
did not mention it (a bucket that appeared later, a tenant that drained). NaN shows as a gap in
the plots. Memory is ``capacity`` floats per series, whatever the run length.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["Array", "History"]

Array = npt.NDArray[np.float64]


class History:
    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"a history keeps at least 2 samples, not {capacity!r}.")
        self.capacity = capacity
        self._t: Array = np.full(capacity, np.nan)
        self._series: dict[str, Array] = {}
        self._head = 0  # where the next sample goes
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, ts: float, values: Mapping[str, float | None]) -> None:
        """Add one sample at ``ts`` (seconds); ``None`` values are stored as NaN."""
        at = self._head
        self._t[at] = ts
        for name, series in self._series.items():
            value = values.get(name)
            series[at] = np.nan if value is None else value
        for name in values.keys() - self._series.keys():
            series = np.full(self.capacity, np.nan)
            value = values[name]
            series[at] = np.nan if value is None else value
            self._series[name] = series
        self._head = (at + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def _ordered(self, array: Array) -> Array:
        if self._count < self.capacity:
            return array[: self._count]
        return np.concatenate((array[self._head :], array[: self._head]))

    def times(self) -> Array:
        """Sample times, oldest first."""
        return self._ordered(self._t)

    def series(self, name: str) -> Array:
        """Values of ``name``, aligned with ``times()``; all NaN for an unknown name."""
        array = self._series.get(name)
        if array is None:
            return np.full(self._count, np.nan)
        return self._ordered(array)

    def latest(self, name: str) -> float | None:
        """The newest value of ``name``, or None when there is none (or it is NaN)."""
        array = self._series.get(name)
        if array is None or self._count == 0:
            return None
        value = float(array[(self._head - 1) % self.capacity])
        return None if np.isnan(value) else value

    def names(self, prefix: str = "") -> list[str]:
        """Series names starting with ``prefix``, sorted."""
        return sorted(name for name in self._series if name.startswith(prefix))

    def resize(self, capacity: int) -> None:
        """Keep the newest ``capacity`` samples."""
        if capacity < 2:
            raise ValueError(f"a history keeps at least 2 samples, not {capacity!r}.")
        keep = min(self._count, capacity)
        times = self.times()[self._count - keep :]
        series = {name: self.series(name)[self._count - keep :] for name in self._series}
        self.capacity = capacity
        self._t = np.full(capacity, np.nan)
        self._t[:keep] = times
        self._series = {}
        for name, values in series.items():
            array = np.full(capacity, np.nan)
            array[:keep] = values
            self._series[name] = array
        self._count = keep
        self._head = keep % capacity

    def drop(self, name: str) -> None:
        """Forget the series ``name`` (nothing when there is none)."""
        self._series.pop(name, None)

    def forget_silent(self) -> int:
        """Drop the series with no value left in the history (not mentioned for as many
        samples as it keeps): the console follows a changing few of thousands of buckets and
        tenants, and each series costs ``capacity`` floats. Returns how many went."""
        silent = [name for name, array in self._series.items() if np.isnan(array).all()]
        for name in silent:
            del self._series[name]
        return len(silent)

    def clear(self) -> None:
        self._t[:] = np.nan
        self._series.clear()
        self._head = self._count = 0

    def __repr__(self) -> str:
        return f"History({self._count}/{self.capacity} samples, {len(self._series)} series)"
