"""The console's pure parts: history ring buffers, formatting, the limit helpers. (The burst
simulator's are in ``test_ui_simulation.py``.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import BucketKey, ConfigError, Counters, Limit
from ui.fmt import fmt_bucket, fmt_count, fmt_duration, fmt_rate
from ui.history import History
from ui.logfeed import audit_text
from ui.models import parse_burst, parse_rate_text
from ui.plotmath import moving_mean as _moving_mean
from ui.plotmath import nice as _nice
from ui.state import RateMeter, Rates, limit_for_window
from ui.views.tenants import limit_from_fields


def test_history_keeps_the_newest_samples_in_order() -> None:
    history = History(3)
    for i in range(5):
        history.append(float(i), {"a": i * 10.0})
    assert history.times().tolist() == [2.0, 3.0, 4.0]
    assert history.series("a").tolist() == [20.0, 30.0, 40.0]
    assert history.latest("a") == 40.0
    assert len(history) == 3


def test_history_fills_gaps_with_nan() -> None:
    history = History(4)
    history.append(1.0, {"a": 1.0})
    history.append(2.0, {"b": 2.0})
    history.append(3.0, {"a": 3.0, "b": None})
    a, b = history.series("a"), history.series("b")
    assert a[0] == 1.0 and math.isnan(a[1]) and a[2] == 3.0
    assert math.isnan(b[0]) and b[1] == 2.0 and math.isnan(b[2])
    assert np.isnan(history.series("missing")).all()
    assert history.latest("b") is None
    assert history.names() == ["a", "b"]


def test_history_resize_keeps_the_newest() -> None:
    history = History(5)
    for i in range(5):
        history.append(float(i), {"a": float(i)})
    history.resize(2)
    assert history.times().tolist() == [3.0, 4.0]
    history.append(5.0, {"a": 5.0})
    assert history.series("a").tolist() == [4.0, 5.0]
    history.resize(4)
    history.append(6.0, {"a": 6.0})
    assert history.series("a").tolist() == [4.0, 5.0, 6.0]
    with pytest.raises(ValueError, match="at least 2"):
        History(1)


@pytest.mark.parametrize(
    ("count", "window_s", "share", "rate", "burst"),
    [
        (100, 60.0, 0.1, 1.5, 10.0),  # 10 up front, 90 over the minute
        (2, 1.0, 0.1, 1.0, 1.0),  # the smallest: burst 1, then 1/s
        (10, 1.0, 0.0, 9.0, 1.0),  # share 0 still needs a burst of 1
        (10, 10.0, 0.95, 0.1, 9.0),  # share capped so the rate stays above 0
        (3600, 3600.0, 0.5, 0.5, 1800.0),
    ],
)
def test_limit_for_window_fits_the_envelope(
    count: int, window_s: float, share: float, rate: float, burst: float
) -> None:
    limit = limit_for_window(count, window_s, share)
    assert limit.rate_per_s == pytest.approx(rate)
    assert limit.burst == burst
    assert limit.burst + limit.rate_per_s * window_s == pytest.approx(count)


@pytest.mark.parametrize(
    ("count", "window_s", "share"), [(1, 1.0, 0.1), (10, 0.0, 0.1), (10, 1.0, 1.0)]
)
def test_limit_for_window_refuses_nonsense(count: int, window_s: float, share: float) -> None:
    with pytest.raises(ConfigError):
        limit_for_window(count, window_s, share)


@pytest.mark.parametrize(
    ("text", "rate"),
    [("", None), ("unlimited", None), ("5", 5.0), ("300/min", 5.0), (" 2/s ", 2.0)],
)
def test_parse_rate_text(text: str, rate: float | None) -> None:
    assert parse_rate_text(text) == rate


@pytest.mark.parametrize("text", ["0", "-1", "abc", "5/week", "nan"])
def test_parse_rate_text_refuses(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_rate_text(text)


@pytest.mark.parametrize("text", ["0.5", "", "x", "inf", "nan"])
def test_parse_burst_refuses(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_burst(text)


def test_limit_from_fields() -> None:
    assert limit_from_fields("10", "") == Limit(10, 10)
    assert limit_from_fields("0.5", "") == Limit(0.5, 1)
    assert limit_from_fields("10", "3") == Limit(10, 3)
    assert limit_from_fields("", "") is None
    with pytest.raises(ConfigError, match="needs a rate"):
        limit_from_fields("", "3")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "—"), (0.25, "250 ms"), (4.24, "4.2 s"), (200, "3 min 20 s"), (7500, "2 h 5 min")],
)
def test_fmt_duration(seconds: float | None, text: str) -> None:
    assert fmt_duration(seconds) == text


@pytest.mark.parametrize(
    ("rate", "text"), [(None, "unlimited"), (50, "50/s"), (0.5, "30/min"), (0.001, "3.6/h")]
)
def test_fmt_rate(rate: float | None, text: str) -> None:
    assert fmt_rate(rate) == text


def test_fmt_count_and_bucket() -> None:
    assert [fmt_count(n) for n in (7, 12_345, 4_100_000)] == ["7", "12.3k", "4.1M"]
    assert fmt_bucket(BucketKey.for_pair("acme", "sms")) == "acme → sms"
    assert fmt_bucket(BucketKey.for_provider("sms")) == "provider sms"


def test_audit_text_is_one_readable_line() -> None:
    text = audit_text(
        "console:ann@host", "tenant.set", {"name": "acme", "rate_per_s": 50.0, "burst": 20.0}
    )
    assert text == "console:ann@host tenant.set acme: rate 50/s, burst 20"
    pair = audit_text("cli", "limit.set", {"tenant": "acme", "provider": "sms", "limit": None})
    assert pair == "cli limit.set acme/sms: unlimited"


def test_rate_meter_follows_the_last_seconds_and_restarts() -> None:
    meter = RateMeter(window_s=2.0)
    assert meter.update(0.0, Counters()) == Rates()
    meter.update(1.0, Counters(delivered=10))
    rates = meter.update(2.0, Counters(delivered=30, throttled=2, failed=1, dead=1))
    assert rates == Rates(15.0, 1.0, 1.0)
    rates = meter.update(3.0, Counters(delivered=36, throttled=2, failed=1, dead=1))
    assert rates.delivered_per_s == pytest.approx(13.0)  # (36 - 10) over the 2 s since t=1
    rates = meter.update(5.0, Counters(delivered=36, throttled=2, failed=1, dead=1))
    assert rates == Rates()  # nothing in the last 2 s
    assert meter.update(6.0, Counters(delivered=3)) == Rates()  # a new engine: start over


@pytest.mark.parametrize(
    ("value", "top"), [(0.2, 1.0), (1.2, 1.5), (42, 50), (151, 200), (9800, 10000), (10780, 15000)]
)
def test_plot_tops_move_in_steps(value: float, top: float) -> None:
    assert _nice(value) == top


def test_moving_mean_keeps_gaps() -> None:
    y = np.array([np.nan, 0, 100, 0, 100, np.nan, 50])
    smoothed = _moving_mean(y, 2)
    assert np.isnan(smoothed[0]) and np.isnan(smoothed[5])
    assert smoothed[1:5].tolist() == [0, 50, 50, 50]
    assert smoothed[6] == 50  # a gap before it counts as nothing, not as zero
    assert _moving_mean(y, 1) is y
