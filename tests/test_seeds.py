"""xfl.seeds: mean ± sd and verdicts over seeds."""

import pytest

from xfl.seeds import differences, mean_sd, paired_interval, verdict


def test_mean_sd_is_the_mean_and_the_sample_standard_deviation():
    assert mean_sd([1.0, 2.0, 3.0]) == "2.000 ± 1.000"
    assert mean_sd([0.5, 0.5], digits=1) == "0.5 ± 0.0"


def test_mean_sd_refuses_a_single_seed():
    with pytest.raises(ValueError, match="at least 2 seeds, got 1"):
        mean_sd([0.3])


def test_verdict_names_a_direction_only_when_every_seed_agrees():
    assert verdict([0.9, 1.0, 0.95], [0.5, 0.6, 0.4], "two", "one").startswith("two higher on every seed")
    assert verdict([0.1, 0.2], [0.5, 0.6], "two", "one").startswith("two lower on every seed")
    mixed = verdict([0.6, 0.4, 0.5], [0.5, 0.5, 0.5], "two", "one")
    assert mixed.startswith("no clear difference") and "two minus one: 0.000 ± 0.100 over 3 seeds" in mixed


def test_paired_runs_must_have_one_value_per_seed_each():
    assert differences([3, 2], [1, 1]) == [2.0, 1.0]
    with pytest.raises(ValueError, match="got 3 and 2"):
        verdict([1, 2, 3], [1, 2], "a", "b")


def test_paired_interval_is_the_t_interval_of_the_differences():
    mean, sd, low, high = paired_interval([1.1, 1.3, 1.2, 1.0, 1.4], [1.0] * 5)
    assert abs(mean - 0.2) < 1e-12 and abs(sd - 0.158113883) < 1e-8
    assert abs(high - low - 2 * 2.776 * sd / 5 ** 0.5) < 1e-12 and low > 0  # t(4) = 2.776
    _, _, low, high = paired_interval([0.6, 0.4, 0.5], [0.5, 0.5, 0.5])
    assert low < 0 < high  # the sign changes: the interval covers 0
    with pytest.raises(ValueError, match="at least 2 seeds, got 1"):
        paired_interval([1.0], [2.0])
