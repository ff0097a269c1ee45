"""Features of an MFU curve and the shape they add up to.

Cleaning (in this order):

1. drop points without a value;
2. **warm-up**: drop leading points until the value first reaches
   ``WARMUP_REACH`` × the series' 75th percentile (at most ``WARMUP_MAX_SHARE`` of the run);
3. **pauses** (checkpoint saves, restarts): drop points below ``PAUSE_SHARE`` × the median.

Features (all relative to the expected MFU = 1.0):

- ``level`` = median of the cleaned values; ``good_level`` = their 90th percentile;
- **segments** split the run at restarts: explicit ``event`` rows, and detected upward jumps
  where ``median(next W) − median(previous W) ≥ JUMP_SHARE × good_level``
  (``W = max(JUMP_MIN_WINDOW, JUMP_WINDOW_SHARE × n)``);
- ``drift`` = duration-weighted mean over segments of ``−slope × duration / good_level``,
  ``slope`` the Theil–Sen estimate (median of pairwise slopes) — the share lost over a segment;
- ``recovery`` = mean over restarts of ``(median(next W) − median(previous W)) / good_level``
  (missing when the run has no restart);
- residuals ``r = value − segment trend`` are resampled on a regular grid (the median step);
  ``periodicity`` = the highest autocorrelation peak of ``r`` at lags of
  ``MIN_PERIOD_STEPS``…n/3 steps, ``dip_period`` its lag in seconds;
  ``dip_depth`` = ``(median(r) − p5(r)) / good_level``;
- ``throttle_overlap`` = share of dip samples (``r < −DIP_SHARE × good_level``) whose throttle
  bitmask has a heat/power bit, minus that share among other samples (missing without a
  throttle column).

Scoring: a rule scores 1 inside ``[min, max]`` and falls linearly to 0 at ``tolerance``
outside; a shape scores the minimum of its rules (skipped rules do not count).  The best
shape wins; ``confidence = best × (0.5 + 0.5 × min(1, (best − second) / 0.5))``, times
``missing_penalty`` for each skipped rule.  Below ``MIN_SCORE`` the answer is "cannot tell".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from .series import Series
from .tables import Rule, Shape, ShapeTable

# --- cleaning -----------------------------------------------------------------------
# Warm-up is over once MFU first reaches 80% of its usual high level (p75): compile and data-loader
# start-up ramps are well below it, and a run that never gets there has no warm-up to drop.
WARMUP_REACH = 0.8
# Never call more than a quarter of the run warm-up: a longer ramp is the run's real shape.
WARMUP_MAX_SHARE = 0.25
# Checkpoint saves and restarts show MFU near zero; thermal dips (~70%) and sags stay far above a quarter.
PAUSE_SHARE = 0.25

# --- honesty limits -------------------------------------------------------------------
# Fewer clean points than this cannot separate a level from noise or show a trend.
MIN_POINTS = 30
# Two minutes: several periods of the ~15 s dips IL-0025 describes, and enough for a level.
MIN_DURATION_S = 120.0
# When more than this share of points is missing or paused, what is left is not the run.
MAX_DROPPED_SHARE = 0.6
# Dips shorter than ~4 samples cannot be told from noise; periods need at least this many steps.
MIN_PERIOD_STEPS = 4
# Autocorrelation over fewer than three periods is not evidence of a period.
MIN_PERIODS = 3

# --- restarts ---------------------------------------------------------------------------
# A restart must lift the level by at least 8% of the good level to count (noise is a few %).
JUMP_SHARE = 0.08
# Compare medians of this many points before and after (a share of the run, at least 5 points)
JUMP_WINDOW_SHARE = 0.06
JUMP_MIN_WINDOW = 5
# Segments shorter than this many points give no usable slope.
MIN_SEGMENT_POINTS = 10
# Jump detection works on at most this many bin medians (enough to place a restart within 0.25%).
JUMP_BINS = 400
# Theil–Sen is O(n²); an even subsample of this many points gives the same median slope.
THEIL_SEN_POINTS = 300

# --- dips -------------------------------------------------------------------------------
# A sample is "in a dip" when it sits this far below its segment trend (noise stays within ~5%).
DIP_SHARE = 0.12
# Periodic dips slower than this are trends, not throttling cycles: IL-0025's cycle was ~15 s, so
# five minutes leaves a wide margin without confusing a sag between restarts with a period.
MAX_PERIOD_S = 300.0
# Sampling gaps longer than this many median steps are left empty rather than interpolated.
GAP_STEPS = 4
# The resampled grid never exceeds this many steps (bounds the autocorrelation cost).
MAX_GRID = 20_000

# --- decision ---------------------------------------------------------------------------
# Below this best score no shape fits well enough to name.
MIN_SCORE = 0.5
# A lead of this much over the runner-up earns full confidence.
CLEAR_LEAD = 0.5


@dataclass
class Features:
    points: int = 0
    duration_s: float = 0.0
    step_s: float = 0.0
    dropped_share: float = 0.0
    warmup_s: float = 0.0
    pauses: int = 0
    level: float | None = None
    good_level: float | None = None
    drift: float | None = None
    recovery: float | None = None
    restarts: list[float] = field(default_factory=list)
    restarts_marked: int = 0
    periodicity: float | None = None
    dip_period_s: float | None = None
    dip_depth: float | None = None
    throttle_overlap: float | None = None
    dips: list[float] = field(default_factory=list)

    def value(self, name: str) -> float | None:
        found: float | None = getattr(self, name)
        return found


@dataclass
class Cleaned:
    t: np.ndarray
    v: np.ndarray
    throttle: np.ndarray | None
    trend: np.ndarray
    segments: list[tuple[int, int]]


@dataclass
class Verdict:
    shape: str | None
    confidence: float
    scores: dict[str, float]
    reason: str | None
    features: Features
    cleaned: Cleaned | None
    skipped: list[str] = field(default_factory=list)


def theil_sen(t: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Median of pairwise slopes and the matching intercept ``median(v − slope·t)``."""
    if len(t) > THEIL_SEN_POINTS:
        pick = np.linspace(0, len(t) - 1, THEIL_SEN_POINTS).astype(int)
        t, v = t[pick], v[pick]
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    ok = dt > 0
    slope = float(np.median((v[j][ok] - v[i][ok]) / dt[ok])) if ok.any() else 0.0
    return slope, float(np.median(v - slope * t))


def _window(n: int) -> int:
    return max(JUMP_MIN_WINDOW, int(JUMP_WINDOW_SHARE * n))


def _jumps(v: np.ndarray, good: float) -> list[int]:
    """Indices where the level steps up by at least JUMP_SHARE × good (non-maximum suppressed).

    Long series are first reduced to ``JUMP_BINS`` bin medians, which keeps the cost linear.
    """
    n = len(v)
    if n > JUMP_BINS:
        edges = np.linspace(0, n, JUMP_BINS + 1).astype(int)
        binned = np.array([np.median(v[a:b]) for a, b in pairwise(edges)])
        return [int(edges[k]) for k in _jumps(binned, good)]
    w = _window(n)
    if n < 2 * w + 1:
        return []
    rise = np.full(n, -np.inf)
    for k in range(w, n - w + 1):
        rise[k] = np.median(v[k : k + w]) - np.median(v[k - w : k])
    found: list[int] = []
    for k in np.argsort(-rise):
        if rise[k] < JUMP_SHARE * good:
            break
        if all(abs(int(k) - f) > w for f in found):
            found.append(int(k))
    # the restart happened at the low point just before the rise (a sag's end or a ramp's start)
    return sorted(int(k) - w + int(np.argmin(v[k - w : k])) for k in found)


def _warmup_end(v: np.ndarray, cap: float) -> int:
    """Index of the first point at WARMUP_REACH × p75 (0 when that is more than ``cap`` points)."""
    if len(v) == 0:
        return 0
    reached = np.nonzero(v >= WARMUP_REACH * float(np.percentile(v, 75)))[0]
    start = int(reached[0]) if len(reached) else 0
    return 0 if start > cap else start


def _clean(series: Series, features: Features) -> Cleaned | None:
    raw = list(series.points)
    have = [p for p in raw if p.value is not None]
    if not have:
        return None
    t = np.array([p.seconds for p in have], dtype=float)
    v = np.array([p.value for p in have], dtype=float)
    thr = np.array([p.throttle if p.throttle is not None else -1 for p in have], dtype=np.int64) if series.has_throttle else None
    event_times = [p.seconds for p in raw if p.event]
    start = _warmup_end(v, WARMUP_MAX_SHARE * len(v))
    if t[start] - t[0] > WARMUP_MAX_SHARE * (t[-1] - t[0]):
        start = 0
    features.warmup_s = float(t[start] - t[0])
    keep = np.arange(len(v)) >= start
    keep &= v >= PAUSE_SHARE * float(np.median(v[start:]))
    features.pauses = int(np.sum(np.diff(np.concatenate([[1], keep[start:].astype(int)])) == -1))
    t, v = t[keep], v[keep]
    thr = thr[keep] if thr is not None else None
    if len(v) < 2:
        features.points = len(v)
        return None
    good = float(np.percentile(v, 90))
    # segments: explicit restarts, then detected upward jumps
    marked_cuts = {int(np.searchsorted(t, e)) for e in event_times if t[0] < e <= t[-1]}
    cuts = sorted(c for c in marked_cuts | set(_jumps(v, good)) if 0 < c < len(v))
    # a restarted job warms up again: drop each later segment's own ramp
    keep = np.ones(len(v), dtype=bool)
    bounds = [0, *cuts, len(v)]
    for a, b in pairwise(bounds[1:]):
        keep[a : a + _warmup_end(v[a:b], min(WARMUP_MAX_SHARE * len(v), 0.5 * (b - a)))] = False
    new_index = np.cumsum(keep) - 1
    starts = sorted({int(new_index[c]) + (0 if keep[c] else 1) for c in cuts})
    t, v = t[keep], v[keep]
    thr = thr[keep] if thr is not None else None
    bounds = [0, *(s for s in starts if 0 < s < len(v)), len(v)]
    segments = [(a, b) for a, b in pairwise(bounds) if b > a]
    features.dropped_share = 1 - len(v) / max(1, len(raw))
    features.points = len(v)
    features.duration_s = float(t[-1] - t[0])
    features.step_s = float(np.median(np.diff(t))) if len(t) > 1 else 0.0
    features.restarts = [float(t[a]) for a, _ in segments[1:]]
    features.restarts_marked = len(marked_cuts)
    trend = np.empty_like(v)
    for a, b in segments:
        if b - a >= MIN_SEGMENT_POINTS:
            slope, intercept = theil_sen(t[a:b], v[a:b])
            trend[a:b] = intercept + slope * t[a:b]
        else:
            trend[a:b] = np.median(v[a:b])
    return Cleaned(t=t, v=v, throttle=thr, trend=trend, segments=segments)


def _periodicity(t: np.ndarray, r: np.ndarray, step: float) -> tuple[float, float | None]:
    if step <= 0:
        return 0.0, None
    n = min(MAX_GRID, int((t[-1] - t[0]) / step) + 1)
    grid = np.linspace(t[0], t[-1], n)
    dt = grid[1] - grid[0] if n > 1 else step
    x = np.interp(grid, t, r)
    x = x - x.mean()
    # no made-up data across gaps (restarts, pauses): a straight interpolated line would look periodic
    after = np.searchsorted(t, grid).clip(1, len(t) - 1)
    x[(t[after] - t[after - 1]) > GAP_STEPS * step] = 0.0
    denom = float(np.dot(x, x))
    max_lag = min(n // MIN_PERIODS, int(MAX_PERIOD_S / dt) + 1)
    if denom <= 0 or max_lag <= MIN_PERIOD_STEPS:
        return 0.0, None
    spectrum = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[: max_lag + 1] / denom
    best, lag = 0.0, None
    for k in range(MIN_PERIOD_STEPS, max_lag):
        if acf[k] > acf[k - 1] and acf[k] >= acf[k + 1] and acf[k] > best:
            best, lag = float(acf[k]), k
    return best, (lag * dt if lag else None)


def measure(series: Series, table: ShapeTable) -> tuple[Features, Cleaned | None]:
    features = Features()
    cleaned = _clean(series, features)
    if cleaned is None or features.points < 2:
        return features, cleaned
    t, v = cleaned.t, cleaned.v
    features.level = float(np.median(v))
    good = float(np.percentile(v, 90))
    features.good_level = good
    drifts, weights = [], []
    for a, b in cleaned.segments:
        if b - a >= MIN_SEGMENT_POINTS and t[b - 1] > t[a]:
            slope, _ = theil_sen(t[a:b], v[a:b])
            duration = float(t[b - 1] - t[a])
            drifts.append(-slope * duration / good)
            weights.append(duration)
    features.drift = float(np.average(drifts, weights=weights)) if drifts else None
    w = _window(len(v))
    recoveries = [(float(np.median(v[a : a + w])) - float(np.median(v[max(0, a - w) : a]))) / good
                  for a, _ in cleaned.segments[1:]]
    features.recovery = float(np.mean(recoveries)) if recoveries else None
    r = v - cleaned.trend
    features.dip_depth = float((np.median(r) - np.percentile(r, 5)) / good)
    if features.duration_s >= MIN_PERIODS * MIN_PERIOD_STEPS * features.step_s:
        features.periodicity, features.dip_period_s = _periodicity(t, r, features.step_s)
    in_dip = r < -DIP_SHARE * good
    features.dips = [float(x) for x in t[in_dip]]
    if cleaned.throttle is not None:
        known = cleaned.throttle >= 0
        hot = (cleaned.throttle & table.heat_or_power_mask) > 0
        dip_known, calm_known = in_dip & known, ~in_dip & known
        if dip_known.any():
            calm_share = float(hot[calm_known].mean()) if calm_known.any() else 0.0
            features.throttle_overlap = max(0.0, float(hot[dip_known].mean()) - calm_share)
        else:
            features.throttle_overlap = 0.0
    return features, cleaned


def rule_score(rule: Rule, value: float, tolerance: float) -> float:
    width = rule.tolerance or tolerance
    below = (rule.min - value) if rule.min is not None and value < rule.min else 0.0
    above = (value - rule.max) if rule.max is not None and value > rule.max else 0.0
    return max(0.0, 1.0 - (below + above) / width)


def shape_score(shape: Shape, features: Features, table: ShapeTable) -> tuple[float, list[str]]:
    scores: list[float] = []
    skipped: list[str] = []
    for rule in shape.rules:
        value = features.value(rule.feature)
        if value is None:
            if rule.missing == "skip":
                skipped.append(rule.feature)
                continue
            scores.append(0.0)
            continue
        scores.append(rule_score(rule, value, table.tolerances[rule.feature]))
    return (min(scores) if scores else 0.0), skipped


def cannot_tell_reason(features: Features) -> str | None:
    if features.points < MIN_POINTS:
        return f"too few usable points ({features.points}; need at least {MIN_POINTS} after dropping warm-up, pauses and gaps)"
    if features.duration_s < MIN_DURATION_S:
        return f"too short ({features.duration_s:.0f} s of usable data; need at least {MIN_DURATION_S:.0f} s)"
    if features.dropped_share > MAX_DROPPED_SHARE:
        return f"too sparse ({features.dropped_share:.0%} of points missing or paused; at most {MAX_DROPPED_SHARE:.0%})"
    return None


def classify(series: Series, table: ShapeTable) -> Verdict:
    features, cleaned = measure(series, table)
    reason = cannot_tell_reason(features)
    if reason is not None:
        return Verdict(shape=None, confidence=0.0, scores={}, reason=reason, features=features, cleaned=cleaned)
    scored = {s.id: shape_score(s, features, table) for s in table.shapes}
    ranked = sorted(scored.items(), key=lambda kv: (-kv[1][0], [s.id for s in table.shapes].index(kv[0])))
    best_id, (best, skipped) = ranked[0]
    second = ranked[1][1][0] if len(ranked) > 1 else 0.0
    scores = {k: round(v[0], 3) for k, v in scored.items()}
    if best < MIN_SCORE:
        close = ", ".join(f"{k} {v:.2f}" for k, (v, _) in ranked[:2])
        return Verdict(shape=None, confidence=0.0, scores=scores, features=features, cleaned=cleaned,
                       reason=f"no shape fits well enough (best scores: {close}; need {MIN_SCORE})")
    confidence = best * (0.5 + 0.5 * min(1.0, (best - second) / CLEAR_LEAD)) * table.missing_penalty ** len(skipped)
    return Verdict(shape=best_id, confidence=round(confidence, 3), scores=scores, reason=None, features=features,
                   cleaned=cleaned, skipped=skipped)
