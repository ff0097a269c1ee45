"""The label-agreement report's gains over the best baseline and their paired bootstrap intervals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from incidentlib.similar_eval import evaluate, relative_gain_interval


def test_a_method_that_doubles_every_query_gains_exactly_one() -> None:
    baseline = np.array([0.2, 0.4, 0.6, 0.8, 0.2, 0.4])
    assert relative_gain_interval(2 * baseline, baseline) == pytest.approx((1.0, 1.0))
    assert relative_gain_interval(baseline, baseline) == pytest.approx((0.0, 0.0))


def test_the_interval_holds_the_gain_and_narrows_with_more_queries() -> None:
    rng = np.random.default_rng(3)

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        baseline = rng.integers(0, 6, size=n) / 5  # P@5 of each query
        better = np.clip(baseline + rng.choice([0.0, 0.2], size=n, p=[0.7, 0.3]), 0, 1)
        return better, baseline

    widths = []
    for n in (40, 4000):
        method, baseline = sample(n)
        gain = method.mean() / baseline.mean() - 1
        interval = relative_gain_interval(method, baseline)
        assert interval is not None
        low, high = interval
        assert low < gain < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 4  # about 1/√100 of it: the width shrinks as 1/√queries
    method, baseline = sample(4000)
    interval = relative_gain_interval(method, baseline)
    assert interval is not None and interval[0] > 0  # a gain on 30 % of 4,000 queries is not the sample's


def test_the_pairing_keeps_a_query_s_two_scores_together() -> None:
    # each query is easy or hard for both: unpaired resampling would mix the two and widen the interval
    baseline = np.repeat([0.0, 1.0], 50)
    method = np.repeat([0.2, 1.0], 50)
    interval = relative_gain_interval(method, baseline)
    assert interval is not None
    unpaired = np.random.default_rng(0)
    ratios = [method[unpaired.integers(0, 100, 100)].mean() / baseline[unpaired.integers(0, 100, 100)].mean() - 1
              for _ in range(2000)]
    assert interval[1] - interval[0] < (np.percentile(ratios, 97.5) - np.percentile(ratios, 2.5)) / 2


def test_bad_arguments_are_refused_and_no_baseline_has_no_interval() -> None:
    with pytest.raises(ValueError, match="one score per query"):
        relative_gain_interval(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="confidence"):
        relative_gain_interval(np.zeros(3), np.zeros(3), confidence=1.0)
    assert relative_gain_interval(np.ones(3), np.zeros(3)) is None
    assert relative_gain_interval(np.zeros(0), np.zeros(0)) is None
    seeded = relative_gain_interval(np.array([0.4, 0.6, 0.2]), np.array([0.2, 0.6, 0.4]))
    assert seeded == relative_gain_interval(np.array([0.4, 0.6, 0.2]), np.array([0.2, 0.6, 0.4]))


def test_the_report_measures_every_method_against_the_better_baseline() -> None:
    # six records in two label groups; rankers are plain functions of the query
    labels = {f"R{i}": {"a" if i < 3 else "b"} for i in range(6)}

    def perfect(query: str, candidates: list[str]) -> list[str]:
        return sorted(candidates, key=lambda c: (labels[c] != labels[query], c))

    def worst(query: str, candidates: list[str]) -> list[str]:
        return sorted(candidates, key=lambda c: (labels[c] == labels[query], c))

    def by_name(query: str, candidates: list[str]) -> list[str]:
        return sorted(candidates)

    report = evaluate("toy", "labels", labels, {"bm25": worst, "dense": by_name, "similar (incident)": perfect}, k=2)
    assert report.baseline == "dense" and report.queries == 6
    scores = {m.method: m for m in report.methods}
    # by name: R0 R1 R2 ask for "a" and get R0..R2 minus themselves first: 1.0; R3..R5 get R0 R1: 0.0
    assert scores["dense"].p_at_k == pytest.approx(0.5) and scores["dense"].gain is None
    assert scores["bm25"].p_at_k == 0.0 and scores["bm25"].gain == pytest.approx(-1.0)
    assert scores["similar (incident)"].p_at_k == 1.0 and scores["similar (incident)"].gain == pytest.approx(1.0)
    perfect_score = scores["similar (incident)"]
    assert perfect_score.gain_low is not None and perfect_score.gain_high is not None
    assert perfect_score.gain_low <= perfect_score.gain <= perfect_score.gain_high
    markdown = report.to_markdown()
    assert "vs best baseline (dense)" in markdown and "95 % interval" in markdown
    assert f"| similar (incident) | 1.000 | 1.000 | +100.0 % | {perfect_score.gain_low * 100:+.1f} to" in markdown
    assert json.loads(report.model_dump_json())["methods"][2]["gain_low"] == perfect_score.gain_low


def test_an_interval_whose_baseline_agrees_on_almost_nothing_is_unbounded_above() -> None:
    # the baseline agrees on 1 query of 60, the method on 3: about a third of the resamples miss the baseline's one
    baseline, method = np.zeros(60), np.zeros(60)
    baseline[0], method[:3] = 0.2, 0.2
    interval = relative_gain_interval(method, baseline)
    assert interval is not None and interval[1] is None and interval[0] >= 0.0
    labels = {f"R{i}": {"a" if i < 3 else f"x{i}"} for i in range(60)}
    labels.update({"R3": {"b"}, "R4": {"b"}})

    def first(query: str, candidates: list[str]) -> list[str]:
        return sorted(candidates)

    report = evaluate("toy", "labels", labels, {"bm25": first, "dense": first}, k=1)
    assert "| dense |" in report.to_markdown()  # a tie: no gain is unbounded here, and nothing breaks


def test_per_query_scores_and_first_records_are_given_when_asked() -> None:
    labels = {f"R{i}": {"a" if i < 3 else "b"} for i in range(6)}

    def by_name(query: str, candidates: list[str]) -> list[str]:
        return sorted(candidates)

    def perfect(query: str, candidates: list[str]) -> list[str]:
        return sorted(candidates, key=lambda c: (labels[c] != labels[query], c))

    rankers = {"random": by_name, "dense": by_name, "similar (text)": perfect}
    assert evaluate("toy", "labels", labels, rankers, k=2).per_query is None  # not unless asked
    report = evaluate("toy", "labels", labels, rankers, k=2, repeats={"random": 3}, per_query=True)
    assert report.per_query is not None
    rows = {row.id: row for row in report.per_query}
    assert sorted(rows) == sorted(labels) and rows["R4"].labels == ["b"]
    # by name, R4 gets R0 and R1 (label a): 0; its perfect neighbours are R3 and R5
    assert rows["R4"].p_at_k == {"random": 0.0, "dense": 0.0, "similar (text)": 1.0}
    assert rows["R4"].neighbours == {"dense": ["R0", "R1"], "similar (text)": ["R3", "R5"]}  # random's order varies: not shown
    means = {m.method: m.p_at_k for m in report.methods}
    for method in rankers:  # the rows are the report's means, query by query
        assert sum(row.p_at_k[method] for row in report.per_query) / len(report.per_query) == pytest.approx(means[method])
