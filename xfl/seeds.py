"""Comparing training variants over seeds: mean ± standard deviation, and a verdict from the
numbers (chapters 2-5, 7, 9 and 10; any chapter that trains variants from several seeds can use it).

    from xfl.seeds import mean_sd, verdict
    print(mean_sd(accuracies))                            # '0.525 ± 0.009'
    print(verdict(two_heads, one_head, "two heads", "one head"))

A verdict names a direction only when every paired seed agrees; otherwise it says there is no
clear difference at this size. Chapters assert only what holds on every seed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def mean_sd(values: Sequence[float], digits: int = 3) -> str:
    """``'m ± s'``: the mean and the sample standard deviation of one number per seed."""
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"mean_sd needs one value per seed and at least 2 seeds, got {len(values)} value(s)")
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``a[i] - b[i]`` for runs paired by seed; both lists must have one value per seed."""
    if len(a) != len(b):
        raise ValueError(f"paired runs need as many values of a as of b (one per seed), got {len(a)} and {len(b)}")
    return [float(x) - float(y) for x, y in zip(a, b)]


def verdict(a: Sequence[float], b: Sequence[float], name_a: str, name_b: str, digits: int = 3) -> str:
    """In words, from runs paired by seed: which is higher and by how much, or no clear difference."""
    diffs = differences(a, b)
    spread = f"{name_a} minus {name_b}: {mean_sd(diffs, digits)} over {len(diffs)} seeds"
    if all(d > 0 for d in diffs):
        return f"{name_a} higher on every seed ({spread})"
    if all(d < 0 for d in diffs):
        return f"{name_a} lower on every seed ({spread})"
    return f"no clear difference at this size: the sign changes across seeds ({spread})"


# Two-sided 95% quantiles of Student's t by degrees of freedom (seeds - 1); between two rows the
# smaller df is used (a wider, conservative interval).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}


def paired_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    """Runs paired by seed: ``(mean, sd, low, high)`` of ``a[i] - b[i]``, with the 95% t-interval
    of the mean difference (a clear difference is one whose interval excludes 0)."""
    diffs = differences(a, b)
    if len(diffs) < 2:
        raise ValueError(f"an interval needs at least 2 seeds, got {len(diffs)}")
    mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
    t = _T95[max(df for df in _T95 if df <= len(diffs) - 1)]
    half = t * sd / len(diffs) ** 0.5
    return mean, sd, mean - half, mean + half


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with an integer ``df`` >= 1, from the closed forms of
    Abramowitz & Stegun 26.7.3-4 (a finite sum in cos θ, θ = atan(|t| / √df))."""
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an int >= 1, got {df!r}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 0:  # A = sin θ (1 + 1/2 c² + (1·3)/(2·4) c⁴ + ... up to c^(df-2))
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = math.sin(theta) * total
    else:  # A = 2/π (θ + sin θ cos θ (1 + 2/3 c² + ... up to c^(df-3))), or 2θ/π for df = 1
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
    return min(1.0, max(0.0, 1.0 - inside))


def paired_p_value(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test of ``a[i] - b[i]`` against a mean of 0."""
    diffs = differences(a, b)
    if len(diffs) < 2:
        raise ValueError(f"a p-value needs at least 2 seeds, got {len(diffs)}")
    mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    return t_two_sided_p(mean / (sd / len(diffs) ** 0.5), len(diffs) - 1)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``m`` p-values (same order as given): the k-th smallest is
    multiplied by m - k + 1, capped at 1 and never below an adjusted smaller one. Rejecting
    where the adjusted value is below α keeps the chance of any false rejection below α."""
    m, adjusted, running = len(p_values), [0.0] * len(p_values), 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        adjusted[i] = running
    return adjusted
