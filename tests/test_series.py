"""MFU curves: reading, cleaning, features, the shape table, and accuracy on held-out synthetic runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from incidentlib import Library
from incidentlib.analysis.series import Series, SeriesPoint, build_series
from incidentlib.analysis.shapes import MIN_POINTS, classify, measure
from incidentlib.analysis.synthetic import DEV_SEEDS, HELDOUT_SEEDS, SHAPES, accuracy, confusion_markdown, generate
from incidentlib.errors import SeriesError, TableError


def _points(series: Series) -> list[dict[str, object]]:
    return [{"seconds": p.seconds, "mfu": p.value, "throttle": p.throttle, "event": p.event} for p in series.points]


def _csv(series: Series) -> str:
    rows = ["seconds,mfu,throttle,event"]
    for p in series.points:
        throttle = "" if p.throttle is None else hex(p.throttle)
        rows.append(f"{p.seconds},{'' if p.value is None else p.value},{throttle},{p.event or ''}")
    return "\n".join(rows) + "\n"


@pytest.mark.slow  # over a second: the fast subset must stay under a minute
def test_generator_covers_every_shape_with_varied_runs() -> None:
    drawn = {shape: [generate(shape, seed)[1] for seed in DEV_SEEDS] for shape in SHAPES}
    for shape, runs in drawn.items():
        steps = [r.step for r in runs]
        assert max(steps) / min(steps) > 2, shape  # sampling differs from run to run
        assert max(r.noise for r in runs) > 2 * min(r.noise for r in runs), shape
        assert max(r.duration for r in runs) > 2 * min(r.duration for r in runs), shape  # length varies
        assert any(r.missing > 0.05 for r in runs) and any(r.restarts for r in runs), shape
        assert any(not r.marked and r.restarts for r in runs), shape  # unmarked restarts occur
    assert set(HELDOUT_SEEDS).isdisjoint(DEV_SEEDS)
    series, _ = generate("thermal-throttle", 3)
    gaps = np.diff([p.seconds for p in series.points])
    assert gaps.std() > 0.1 * gaps.mean()  # irregular sampling
    assert any(p.value is None for p in series.points)  # missing points


@pytest.mark.slow
def test_held_out_accuracy_is_at_least_90_percent(library: Library) -> None:
    share, confusion = accuracy(library.shape_table, HELDOUT_SEEDS)
    assert share >= 0.9, confusion_markdown(confusion)
    for shape in SHAPES:  # no class is sacrificed for the average
        assert confusion[shape][shape] / sum(confusion[shape].values()) >= 0.8, shape


@pytest.mark.parametrize("shape", SHAPES)
def test_library_names_each_shape_with_its_incidents(library: Library, shape: str) -> None:
    series, _ = generate(shape, 1001)
    result = library.diagnose_series(points=_points(series), lang="en")
    assert result.shape == shape, (result.scores, result.features)
    assert 0 < result.confidence <= 1
    assert result.chart.count("\n") == 2
    if shape == "healthy":
        assert result.incidents == []
    else:
        assert result.incidents[0].id == "IL-0025" and result.incidents[0].pinned
        assert any("IL-0025" in line for line in result.evidence)
        assert {c.id for c in result.symptoms} >= {"throughput-drop"}


def test_gc_drift_features_and_korean_output(library: Library) -> None:
    series, params = generate("gc-drift", 1002)
    result = library.diagnose_series(text=_csv(series), lang="ko")
    assert result.shape == "gc-drift"
    assert result.features.drift is not None and result.features.drift > 0.1
    assert result.features.recovery is not None and result.features.recovery > 0.08
    assert len(result.features.restarts) >= params.restarts
    assert "\\" in result.chart.splitlines()[1] and "|" in result.chart.splitlines()[1]
    assert result.label == "서서히 처지다 재시작하면 회복되는 MFU"
    assert "IL-0009" in [i.id for i in result.incidents]  # the other runtime-pause incident


def test_thermal_dips_period_and_throttle_overlap(library: Library) -> None:
    t = np.arange(0, 1800, 1.0)
    dipping = (t % 15) < 4  # every 15 s, ~4 s at 70%
    points = [{"seconds": float(s), "mfu": 0.7 if d else 0.98, "throttle": 0x40 if d else 0} for s, d in zip(t, dipping, strict=False)]
    result = library.diagnose_series(points=points)
    assert result.shape == "thermal-throttle"
    assert result.features.dip_period_s == pytest.approx(15, abs=1)
    assert result.features.throttle_overlap == pytest.approx(1.0)
    assert result.features.dip_depth == pytest.approx(0.28, abs=0.03)
    # the same dips with throttle bits that are not heat or power (GpuIdle, SyncBoost): no overlap
    cold = [{**p, "throttle": 0x1 | 0x10 if p["throttle"] else 0} for p in points]
    assert library.diagnose_series(points=cold).features.throttle_overlap == 0.0
    # without a throttle column the rule is skipped and confidence drops by the table's penalty
    bare = [{"seconds": p["seconds"], "mfu": p["mfu"]} for p in points]
    plain = library.diagnose_series(points=bare)
    assert plain.shape == "thermal-throttle" and plain.features.throttle_overlap is None
    assert plain.confidence < result.confidence


def test_absolute_values_with_expected_and_prometheus_json(library: Library) -> None:
    t = np.arange(0, 1200, 10.0)
    rng = np.random.default_rng(0)
    values = 400 * 0.3 * (1 + rng.normal(0, 0.02, len(t)))  # TFLOP/s at 30% of 400
    prom = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"job": "trainer"}, "values": [[1717243200 + s, f"{v:.3f}"] for s, v in zip(t, values, strict=False)]}]}}
    with pytest.raises(SeriesError, match="absolute"):
        library.diagnose_series(text=json.dumps(prom))
    result = library.diagnose_series(text=json.dumps(prom), expected=400)
    assert result.shape == "gdr-misconfig"
    assert result.features.level == pytest.approx(0.3, abs=0.02)


def test_cannot_tell_when_too_short_or_too_sparse(library: Library) -> None:
    short = [{"seconds": float(s), "mfu": 0.95} for s in range(MIN_POINTS - 5)]
    result = library.diagnose_series(points=short)
    assert result.shape is None and "too few usable points" in (result.cannot_tell or "")
    brief = [{"seconds": s * 0.5, "mfu": 0.95} for s in range(100)]  # 50 s of data
    assert "too short" in (library.diagnose_series(points=brief).cannot_tell or "")
    sparse = [{"seconds": float(s), "mfu": 0.95 if s % 4 == 0 else None} for s in range(600)]
    assert "too sparse" in (library.diagnose_series(points=sparse).cannot_tell or "")
    korean = library.diagnose_series(points=short, lang="ko")
    assert (korean.cannot_tell or "").startswith("판단할 수 없습니다")


def test_warmup_and_pauses_are_dropped(library: Library) -> None:
    t = np.arange(0, 3600, 5.0)
    v = np.full(len(t), 0.7)
    v[t < 120] = np.linspace(0.05, 0.7, int((t < 120).sum()))  # warm-up ramp
    v[(t > 1000) & (t < 1090)] = 0.01  # a checkpoint save
    series = build_series([SeriesPoint(seconds=float(s), value=float(x)) for s, x in zip(t, v, strict=False)])
    features, _ = measure(series, Library.open().shape_table)
    assert 60 <= features.warmup_s <= 120
    assert features.pauses == 1
    assert features.level == pytest.approx(0.7)
    assert classify(series, Library.open().shape_table).shape == "degraded-links"


@pytest.mark.parametrize(("text", "message"), [
    ("seconds,mfu\n0,abc\n", "row 1, mfu: expected a number"),
    ("time,value,throttle\n0,0.5,hot\n", "row 1, throttle: expected an integer bitmask"),
    ("foo,bar\n1,2\n", "needs a time column"),
    ("[1, 2]", "point 1: must be an object"),
    ("{\"points\": 3}", "JSON must be a list"),
    ("{bad json", "not valid JSON"),
    ("seconds,mfu\n0,-0.5\n", "cannot be negative"),
])
def test_bad_series_input_names_the_field(library: Library, text: str, message: str) -> None:
    with pytest.raises(SeriesError, match=message):
        library.diagnose_series(text=text)


def test_series_source_rules(library: Library, tmp_path: Path) -> None:
    with pytest.raises(SeriesError, match="exactly one"):
        library.diagnose_series(points=[], text="x")
    with pytest.raises(SeriesError, match="no such file"):
        library.diagnose_series(path=tmp_path / "missing.csv")
    with pytest.raises(SeriesError, match="expected: must be a positive number"):
        library.diagnose_series(text="seconds,mfu\n0,1\n", expected=0)


def test_shape_table_errors_name_file_and_field(library_copy: Path) -> None:
    table = library_copy / "diagnosis" / "shapes.yaml"
    doc = yaml.safe_load(table.read_text(encoding="utf-8"))
    doc["shapes"][0]["symptoms"] = ["throughput-dropp"]
    doc["shapes"][1]["rules"][0]["feature"] = "levle"
    doc["shapes"][2]["rules"][0].update({"min": 0.9, "max": 0.1})
    table.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    with pytest.raises(TableError) as caught:
        _ = Library.open(library_copy).shape_table
    message = str(caught.value)
    assert "shapes.yaml" in message
    assert "shapes.1.rules.0.feature" in message
    assert "shapes.2.rules.0" in message and "above max" in message
    doc["shapes"][1]["rules"][0]["feature"] = "level"
    doc["shapes"][2]["rules"][0].update({"min": 0.55, "max": 0.84})
    table.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    with pytest.raises(TableError, match="unknown symptom 'throughput-dropp' \\(did you mean throughput-drop"):
        _ = Library.open(library_copy).shape_table


def test_a_team_adds_a_shape_in_yaml(library_copy: Path) -> None:
    table = library_copy / "diagnosis" / "shapes.yaml"
    doc = yaml.safe_load(table.read_text(encoding="utf-8"))
    doc["shapes"].append({
        "id": "half-speed", "label": {"en": "MFU stuck near half", "ko": "절반 근처의 MFU"},
        "description": {"en": "Half of expected.", "ko": "기대치의 절반."},
        "rules": [{"feature": "level", "min": 0.46, "max": 0.54}, {"feature": "drift", "max": 0.05}],
        "likely": {"en": "Half the nodes' NICs are down.", "ko": "노드 절반의 NIC가 꺼졌다."},
        "symptoms": ["throughput-drop"], "causes": [], "components": ["nic"], "incidents": [],
    })
    table.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    library = Library.open(library_copy)
    points = [{"seconds": float(s), "mfu": 0.5 + 0.01 * ((s * 7) % 3 - 1)} for s in range(0, 1200, 4)]
    result = library.diagnose_series(points=points)
    assert result.shape == "half-speed" and result.likely == "Half the nodes' NICs are down."
    assert result.incidents and all(i.pinned is False for i in result.incidents)


def test_library_without_diagnosis_folder_uses_bundled_tables(tmp_path: Path, data_dir: Path) -> None:
    from conftest import small_library

    root = small_library(tmp_path / "lib", data_dir, ["IL-0025", "IL-0009"])
    library = Library.open(root)
    series, _ = generate("gc-drift", 1003)
    result = library.diagnose_series(points=_points(series))
    assert result.shape == "gc-drift"
    assert [i.id for i in result.incidents] == ["IL-0025", "IL-0009"]


def test_curve_for_plotting_is_thin_and_keeps_the_dips(library: Library) -> None:
    t = np.arange(0, 7200, 1.0)  # two hours at 1 Hz: 7,200 points
    dipping = (t % 15) < 4
    points = [{"seconds": float(s), "mfu": 0.7 if d else 0.98} for s, d in zip(t, dipping, strict=True)]
    result = library.diagnose_series(points=points)
    from incidentlib.analysis.mfu import CURVE_BUCKETS

    assert 0 < len(result.curve) <= 2 * CURVE_BUCKETS
    assert [p.t for p in result.curve] == sorted(p.t for p in result.curve)
    # every bucket keeps its lowest point, so the 70 % dips survive the thinning
    assert min(p.v for p in result.curve) == pytest.approx(0.7)
    assert max(p.v for p in result.curve) == pytest.approx(0.98)
    assert result.dips and all(0 <= d <= 7200 for d in result.dips)
    healthy = library.diagnose_series(points=[{"seconds": float(s), "mfu": 0.98} for s in t])
    assert healthy.curve and not healthy.dips


def test_csv_text_that_the_csv_module_refuses_is_a_series_error() -> None:
    """Any text is read as CSV or refused with a SeriesError naming the source, never a csv module error (a fuzzer's
    text with a bare carriage return inside a field once gave a server error); bare carriage returns end rows."""
    from incidentlib.analysis.series import parse_text
    from incidentlib.errors import SeriesError

    fuzzed = json.loads('"\\u00d4\\u0083\\u00c9\\u00db\\u00a1\\u0006\\u00c1\\u0096\\ud907\\udeb1V\\nMX\\r#"')
    with pytest.raises(SeriesError, match=r"^text: "):
        parse_text(fuzzed, "text")
    assert [p.value for p in parse_text("seconds,mfu\r0,0.5\r1,0.6\r\n2,0.7\n", "text")] == [0.5, 0.6, 0.7]
    with pytest.raises(SeriesError, match=r"^text: not readable as CSV \(line \d+: field larger than field limit"):
        parse_text("seconds,mfu\n0," + "9" * 200_000 + "\n", "text")
    # a row with more cells than the header (a fuzzer's one-column header then a comma) is named, not a server error
    with pytest.raises(SeriesError, match=r"^text: row 1: has more cells than the header's 1"):
        parse_text("95\u00b6oq`-S\n,\U0001f0deU\u00b0", "text")
    with pytest.raises(SeriesError, match=r"^text: row 2: has more cells"):
        parse_text("seconds,mfu\n0,0.5\n1,0.6,extra\n", "text")


def test_a_library_without_its_own_tables_does_not_need_their_example_incidents(tmp_path: Path, data_dir: Path,
                                                                                  library_copy: Path) -> None:
    """A team's library (made by an import) reads the bundled shape table, whose shapes cite curated incidents as
    examples; it validates and reads MFU curves without them.  A library's own table still must cite its incidents."""
    from conftest import small_library

    team = small_library(tmp_path / "team", data_dir, ["IL-0101"])
    assert "IL-0025" in {i for shape in Library.open().shape_table.shapes for i in shape.incidents}
    assert Library.check(team)[2] == []
    points = [{"seconds": float(s), "mfu": 0.5} for s in range(0, 1200, 4)]
    result = Library.open(team).diagnose_series(points=points)
    assert all(incident.id == "IL-0101" for incident in result.incidents)
    table = library_copy / "diagnosis" / "shapes.yaml"
    doc = yaml.safe_load(table.read_text(encoding="utf-8"))
    doc["shapes"][0]["incidents"] = ["IL-9999"]
    table.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    with pytest.raises(TableError, match=r"shapes\[0\] \(\S+\)\.incidents: unknown incident 'IL-9999'"):
        _ = Library.open(library_copy).shape_table
