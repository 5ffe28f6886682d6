"""Small statistics helpers."""

from __future__ import annotations

import math


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (NaN when empty)."""
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]
