"""xfl.timing: time_call (warm-up apart, median and spread, bad input named) and compare (interleaved
candidates, pinned and restored threads, median of per-pair ratios, a warning when the spread hides
the effect)."""

import time

import pytest
import torch

from xfl import timing as timing_module
from xfl.timing import Ratio, Timing, compare, pinned_threads, time_call


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



@pytest.fixture
def fake_clock(monkeypatch):
    """A clock that moves only when a candidate says how long it took: ``step(seconds)``."""
    now = [0.0]
    monkeypatch.setattr(timing_module.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(timing_module.time, "thread_time", lambda: now[0])

    def step(seconds):
        now[0] += seconds
    return step


def candidate(fake_clock, durations, log=None, name=None):
    """A function that takes the next of ``durations`` seconds on the fake clock at each call."""
    durations = iter(durations)

    def fn():
        if log is not None:
            log.append(name)
        fake_clock(next(durations))
    return fn


def test_calls_are_interleaved_and_the_order_is_recorded(fake_clock):
    log = []
    fns = {name: candidate(fake_clock, [1.0] * 10, log, name) for name in ("a", "b")}
    cmp = compare(fns, pairs=4, warmup=1)
    assert log[:2] == ["b", "a"]  # the warm-up round, untimed; the rotation goes on into the timed ones
    assert cmp.order == ("a", "b", "b", "a", "a", "b", "b", "a") == tuple(log[2:])
    three = {name: candidate(fake_clock, [1.0] * 10, None, name) for name in ("x", "y", "z")}
    assert compare(three, pairs=3, warmup=0).order == tuple("xyz" "yzx" "zxy")


def test_threads_are_pinned_and_restored(fake_clock):
    before = torch.get_num_threads()
    seen = []
    fns = {"a": lambda: seen.append(torch.get_num_threads()), "b": lambda: None}
    try:
        torch.set_num_threads(2)
        cmp = compare(fns, pairs=3, warmup=1, threads=1)
        assert seen == [1] * 4 and cmp.threads == 1 and torch.get_num_threads() == 2
        assert "1 thread(s)" in str(cmp)
        with pytest.raises(RuntimeError, match="boom"):
            with pinned_threads(1):
                raise RuntimeError("boom")
        assert torch.get_num_threads() == 2  # restored after an error too
        time_call(lambda: seen.append(torch.get_num_threads()), repeats=1, warmup=0, threads=1)
        assert seen[-1] == 1 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_ratio_is_the_median_of_per_pair_ratios(fake_clock):
    a = candidate(fake_clock, [2, 4, 6, 8, 10])
    b = candidate(fake_clock, [1, 1, 2, 2, 5])  # per-pair ratios 2, 4, 3, 4, 2
    cmp = compare({"a": a, "b": b}, pairs=5, warmup=0)
    ratio = cmp.ratio("a", "b")
    assert (ratio.median, ratio.low, ratio.high, ratio.pairs) == (3, 2, 4, 5)
    assert cmp.median_s("a") == 6 and cmp.timing("b").spread_s == 4
    assert cmp.ratio("b", "a").median == pytest.approx(1 / 3)
    assert ratio.clear and cmp.verdict("a", "b").startswith("b is 3.00x faster than a")
    assert cmp.verdict("b", "a").startswith("b is 3.00x faster than a")
    assert "WARNING" not in cmp.report("a", "b")
    summary = cmp.summary("a", "b")
    assert (summary["a_s"], summary["b_s"], summary["ratio"], summary["ratio_interquartile"]) == (6, 2, 3, [2, 4])
    assert summary["verdict"] == cmp.verdict("a", "b") and summary["threads"] == 1
    assert summary["clock"] == "thread CPU"


def test_a_burst_that_hits_one_pair_cancels_in_its_ratio(fake_clock):
    a = candidate(fake_clock, [1, 1, 50, 1, 1])
    b = candidate(fake_clock, [0.5, 0.5, 25, 0.5, 0.5])
    ratio = compare({"a": a, "b": b}, pairs=5, warmup=0).ratio("a", "b")
    assert (ratio.median, ratio.low, ratio.high) == (2, 2, 2)


def test_a_warning_when_the_spread_is_larger_than_the_effect(fake_clock):
    a = candidate(fake_clock, [0.8, 1.2, 0.9, 1.3, 1.1])
    b = candidate(fake_clock, [1, 1, 1, 1, 1])  # ratios straddle 1: median 1.1, quartiles 0.9-1.2
    cmp = compare({"a": a, "b": b}, pairs=5, warmup=0)
    ratio = cmp.ratio("a", "b")
    assert not ratio.clear and ratio.low < 1 < ratio.high
    assert cmp.verdict("a", "b").startswith("no clear difference between a and b")
    assert "WARNING" in cmp.report("a", "b")


def test_ratio_verdict_reads_its_numbers():
    assert Ratio("a", "b", 0.5, 0.4, 0.6, 9).verdict().startswith("a is 2.00x faster than b")
    assert not Ratio("a", "b", 1.4, 0.99, 1.6, 9).clear


@pytest.mark.parametrize("kwargs, message", [(dict(pairs=2), "pairs"), (dict(warmup=-1), "warmup"),
                                             (dict(threads=0), "threads")])
def test_compare_names_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compare({"a": lambda: None, "b": lambda: None}, **kwargs)


def test_compare_needs_two_candidates_and_known_names():
    with pytest.raises(ValueError, match="at least 2"):
        compare({"a": lambda: None})
    cmp = compare({"a": lambda: None, "b": lambda: None}, pairs=3, warmup=0)
    with pytest.raises(KeyError, match="'c'"):
        cmp.ratio("a", "c")


def test_one_cpu_thread_reads_the_threads_cpu_clock():
    """Time spent asleep (as when descheduled) counts on the wall clock, not on one thread's CPU clock."""
    nap = {"sleep": lambda: time.sleep(0.02), "nothing": lambda: None}
    on_one = compare(nap, pairs=3, warmup=0, threads=1)
    on_wall = compare(nap, pairs=3, warmup=0, threads=None)
    assert on_one.clock == "thread CPU" and on_wall.clock == "wall" and "thread CPU clock" in str(on_one)
    assert on_one.median_s("sleep") < 0.005 <= 0.015 < on_wall.median_s("sleep")
    assert time_call(lambda: time.sleep(0.02), repeats=1, warmup=0, threads=1).median_s < 0.005
    assert timing_module.clock_for("cuda", 1) is time.perf_counter
