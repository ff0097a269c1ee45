"""Synthetic MFU series for every shape, with the mess real logs have.

``generate(shape, seed)`` draws one run: a level (or a sag, or periodic dips) per the
shape's description in IL-0025, then noise, irregular sampling, missing points, a warm-up
ramp, checkpoint pauses and unmarked restarts.  ``accuracy(seeds)`` classifies one series
per shape and seed and returns a confusion table.  Run ``python -m incidentlib.analysis.synthetic``
for the held-out table in docs/diagnosis.md.

The rules in data/diagnosis/shapes.yaml were tuned on ``DEV_SEEDS`` only; the test and the
docs report ``HELDOUT_SEEDS``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .series import Series, SeriesPoint, build_series
from .shapes import classify
from .tables import ShapeTable

SHAPES = ("fabric-down", "gdr-misconfig", "degraded-links", "gc-drift", "thermal-throttle", "healthy")
DEV_SEEDS = range(40)
HELDOUT_SEEDS = range(1000, 1050)

# Throttle bits the generator sets during heat/power dips (nvml.h values) and, as noise, elsewhere.
HW_THERMAL = 0x40
SW_POWER_CAP = 0x4
HW_POWER_BRAKE = 0x80
GPU_IDLE = 0x1


def _base(shape: str, rng: np.random.Generator, t: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    if shape == "fabric-down":
        return np.full_like(t, rng.uniform(0.02, 0.09))
    if shape == "gdr-misconfig":
        return np.full_like(t, rng.uniform(0.24, 0.4))
    if shape == "degraded-links":
        return np.full_like(t, rng.uniform(0.6, 0.8))
    if shape == "healthy":
        return np.full_like(t, rng.uniform(0.9, 1.03))
    if shape == "gc-drift":
        # each segment starts near expected and has lost 15-40% by the time someone restarts it
        start = rng.uniform(0.93, 1.02)
        loss = rng.uniform(0.15, 0.4)
        curve = rng.uniform(1.0, 1.6)  # >1: the sag speeds up as garbage piles up
        ends = np.append(np.unique(seg_start)[1:], t[-1] if len(t) else 0.0)
        seg_end = ends[np.searchsorted(np.unique(seg_start), seg_start)]
        age = (t - seg_start) / np.maximum(seg_end - seg_start, 1.0)
        sag: np.ndarray = start * (1 - loss * np.clip(age, 0, 1) ** curve)
        return sag
    if shape == "thermal-throttle":
        good = rng.uniform(0.92, 1.03)
        period = rng.uniform(10.0, 40.0)
        duty = rng.uniform(0.2, 0.4)
        depth = rng.uniform(0.22, 0.4)
        phase = (t / period + rng.uniform()) % 1.0
        return np.where(phase < duty, good * (1 - depth), good)
    raise ValueError(f"unknown shape {shape!r}")


@dataclass(frozen=True)
class RunParams:
    """What the generator drew for one run."""

    duration: float
    step: float
    noise: float
    restarts: int
    marked: bool
    missing: float
    warmup: float
    throttle: bool


def generate(shape: str, seed: int) -> tuple[Series, RunParams]:
    """One synthetic run of ``shape``; returns the series and the parameters drawn."""
    rng = np.random.default_rng([seed, SHAPES.index(shape)])
    duration = float(rng.uniform(900, 7200))
    if shape == "thermal-throttle":
        step = float(rng.uniform(0.5, 2.5))
    elif shape == "gc-drift":
        step = float(rng.uniform(2, 15))
        duration = float(rng.uniform(3600, 14400))
    else:
        step = float(rng.uniform(1, 20))
    # irregular sampling: each gap is step × U(0.5, 1.5)
    gaps = step * rng.uniform(0.5, 1.5, size=int(duration / step) + 1)
    t = np.cumsum(gaps)
    t = t[t < duration]
    # restarts: gc-drift always restarts at least once (that is its tell); others sometimes
    n_restarts = int(rng.integers(1, 3)) if shape == "gc-drift" else int(rng.integers(0, 2))
    restart_times = np.sort(rng.uniform(0.25, 0.85, size=n_restarts) * duration)
    if n_restarts > 1 and np.diff(restart_times).min() < 0.15 * duration:
        restart_times = restart_times[:1]
    seg_start = np.zeros_like(t)
    for r in restart_times:
        seg_start = np.where(t >= r, r, seg_start)
    value = _base(shape, rng, t, seg_start)
    noise = rng.uniform(0.01, 0.05)
    value = value * (1 + rng.normal(0, noise, size=len(t)))
    # warm-up ramp at the start and after each restart
    warmup = rng.uniform(30, 240)
    for start in (0.0, *restart_times):
        ramp = (t >= start) & (t < start + warmup)
        value = np.where(ramp, value * (0.1 + 0.9 * (t - start) / warmup), value)
    # restarts take time: no samples for a while before the job is back
    for r in restart_times:
        down = rng.uniform(60, 300)
        keep = ~((t >= r - down) & (t < r))
        t, value, seg_start = t[keep], value[keep], seg_start[keep]
    # checkpoint pauses: MFU near zero for 20-90 s
    for _ in range(int(rng.integers(0, 4))):
        at, length = rng.uniform(0, duration), rng.uniform(20, 90)
        value = np.where((t >= at) & (t < at + length), rng.uniform(0.0, 0.03), value)
    # missing points
    missing = rng.uniform(0, 0.15)
    present = rng.uniform(size=len(t)) >= missing
    mark_restarts = bool(rng.uniform() < 0.5)
    with_throttle = (shape == "thermal-throttle" and rng.uniform() < 0.7) or (shape != "thermal-throttle" and rng.uniform() < 0.3)
    heat_bit = int(rng.choice([HW_THERMAL, SW_POWER_CAP, HW_POWER_BRAKE]))
    base_good = np.percentile(value, 90)
    first_after = {int(np.searchsorted(t, r)) for r in restart_times}
    points = []
    for k in range(len(t)):
        throttle = None
        if with_throttle:
            dipping = shape == "thermal-throttle" and value[k] < 0.85 * base_good
            throttle = heat_bit if dipping else (GPU_IDLE if rng.uniform() < 0.02 else 0)
        event = "restart" if mark_restarts and k in first_after else None
        points.append(SeriesPoint(seconds=round(float(t[k]), 3), value=float(value[k]) if present[k] else None,
                                  throttle=throttle, event=event))
    params = RunParams(duration=duration, step=step, noise=float(noise), restarts=n_restarts, marked=mark_restarts,
                       missing=float(missing), warmup=float(warmup), throttle=bool(with_throttle))
    return build_series(points), params


def accuracy(table: ShapeTable, seeds: Iterable[int]) -> tuple[float, dict[str, Counter[str]]]:
    """Share of synthetic series classified as their shape, and the confusion counts per shape."""
    confusion: dict[str, Counter[str]] = {shape: Counter() for shape in SHAPES}
    for seed in seeds:
        for shape in SHAPES:
            series, _ = generate(shape, seed)
            verdict = classify(series, table)
            confusion[shape][verdict.shape or "cannot-tell"] += 1
    total = sum(sum(c.values()) for c in confusion.values())
    right = sum(confusion[s][s] for s in SHAPES)
    return right / total, confusion


def confusion_markdown(confusion: dict[str, Counter[str]]) -> str:
    columns = [*SHAPES, "cannot-tell"]
    lines = ["| true \\ predicted | " + " | ".join(columns) + " | accuracy |", "|---" * (len(columns) + 2) + "|"]
    for shape in SHAPES:
        row = confusion[shape]
        n = sum(row.values())
        lines.append(f"| {shape} | " + " | ".join(str(row[c]) for c in columns) + f" | {row[shape] / n:.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from ..library import Library

    parser = argparse.ArgumentParser(description="Accuracy of the MFU shape classifier on synthetic series.")
    parser.add_argument("--seeds", default="heldout", help="heldout (default), dev, or FROM-TO")
    args = parser.parse_args(argv)
    if args.seeds == "heldout":
        seeds: Iterable[int] = HELDOUT_SEEDS
    elif args.seeds == "dev":
        seeds = DEV_SEEDS
    else:
        low, high = (int(x) for x in args.seeds.split("-"))
        seeds = range(low, high + 1)
    table = Library.open().shape_table
    _share, _confusion = accuracy(table, seeds)


if __name__ == "__main__":
    main()
