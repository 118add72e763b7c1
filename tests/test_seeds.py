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


def test_t_p_value_matches_the_t_table_and_known_values():
    from xfl.seeds import _T95, t_two_sided_p
    for df, t in _T95.items():  # the table's two-sided 95% quantiles give p = 0.05
        assert abs(t_two_sided_p(t, df) - 0.05) < 2e-4, (df, t)
    assert t_two_sided_p(0.0, 4) == 1.0 and t_two_sided_p(-2.776, 4) == t_two_sided_p(2.776, 4)
    assert abs(t_two_sided_p(1.0, 1) - 0.5) < 1e-12  # Cauchy: P(|T| >= 1) = 1/2
    assert abs(t_two_sided_p(2.0, 2) - (1 - 2 / 6 ** 0.5)) < 1e-12  # df 2: 1 - t / sqrt(2 + t²)
    with pytest.raises(ValueError, match="df must be an int >= 1, got 0"):
        t_two_sided_p(1.0, 0)


def test_paired_p_value_and_holm():
    from xfl.seeds import holm, paired_p_value
    p = paired_p_value([1.1, 1.3, 1.2, 1.0, 1.4], [1.0] * 5)  # mean 0.2, sd 0.158: t = 2.83, df 4
    assert 0.04 < p < 0.05
    assert paired_p_value([1.0, 2.0], [1.0, 2.0]) == 1.0 and paired_p_value([2.0, 3.0], [1.0, 2.0]) == 0.0
    # sorted 0.01, 0.03, 0.04, 0.2 -> x4, x3, x2 (never below the one before), x1
    assert holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert holm([0.5, 0.6]) == [1.0, 1.0] and holm([]) == []
