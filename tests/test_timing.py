"""xfl.timing: the one timer counts warm-up apart, reports median and spread, rejects bad input."""

import time

import pytest

from xfl.timing import Timing, time_call


def test_warmup_calls_are_not_timed():
    calls = []

    def fn():
        calls.append(len(calls))
        time.sleep(0.05 if len(calls) <= 2 else 0.001)  # the two warm-up calls are slow

    timing = time_call(fn, repeats=5, warmup=2)
    assert len(calls) == 7 and timing.repeats == 5
    assert timing.median_s < 0.02  # the slow warm-up calls are not in the median


def test_median_and_spread():
    delays = iter([0.001, 0.001, 0.03, 0.001, 0.001])
    timing = time_call(lambda: time.sleep(next(delays)), repeats=5, warmup=0)
    assert 0.001 <= timing.median_s < 0.01  # one slow run does not move the median
    assert timing.spread_s >= 0.025  # ... but shows in the spread
    assert "ms" in str(timing) and timing.median_ms == pytest.approx(1e3 * timing.median_s)


@pytest.mark.parametrize("kwargs, message", [(dict(repeats=0), "repeats"), (dict(repeats=2.5), "repeats"),
                                             (dict(warmup=-1), "warmup")])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        time_call(lambda: None, **kwargs)


def test_timing_is_a_value():
    assert Timing(0.002, 0.001, 3) == Timing(0.002, 0.001, 3)
