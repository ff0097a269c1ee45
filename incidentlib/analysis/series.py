"""Reading a metric series (MFU over time) from CSV, JSON or a Prometheus range query.

A series is a list of points ``(seconds, value, throttle, event)``:

- ``seconds``: time of the sample (numbers, or ISO 8601 timestamps turned into epoch seconds);
- ``value``: MFU as a fraction of the expected value, or an absolute value divided by ``expected``;
- ``throttle``: optional DCGM clock-throttle-reason bitmask (decimal or ``0x`` hex);
- ``event``: optional marker; any non-empty text (``restart``, ``resume``...) marks a restart.

Accepted inputs:

- CSV with a header row naming the columns (``seconds``/``time``/``timestamp``/``t``,
  ``mfu``/``value``, ``throttle``, ``event``);
- JSON: a list of point objects, ``{"points": [...]}``, or a Prometheus range-query
  answer (``data.result[0].values`` as ``[[ts, "value"], ...]``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import SeriesError
from ..requests import MAX_SERIES_BYTES, MAX_SERIES_POINTS

# Size limits are request rules (incidentlib.requests), shared with the HTTP API.
MAX_POINTS = MAX_SERIES_POINTS
MAX_BYTES = MAX_SERIES_BYTES
# Values above this without --expected are almost surely absolute (TFLOP/s, %), not a fraction.
MAX_FRACTION = 3.0

TIME_COLUMNS = ("seconds", "time", "timestamp", "t", "ts")
VALUE_COLUMNS = ("mfu", "value", "y")
THROTTLE_COLUMNS = ("throttle", "throttle_reasons", "clock_throttle_reasons")
EVENT_COLUMNS = ("event", "events", "marker")


class SeriesPoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seconds: float
    value: float | None
    throttle: int | None = None
    event: str | None = None


class Series(BaseModel):
    """Points sorted by time; ``value`` is a fraction of expected once ``normalised``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    points: list[SeriesPoint]
    has_throttle: bool = False
    has_events: bool = False


def _number(raw: object, where: str, *, allow_empty: bool = True) -> float | None:
    if raw is None or (isinstance(raw, str) and raw.strip() in ("", "nan", "NaN", "null", "NA")):
        if allow_empty:
            return None
        raise SeriesError(where, "is empty")
    if isinstance(raw, bool):
        raise SeriesError(where, f"expected a number, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        text = str(raw).strip()
        try:
            value = float(text)
        except ValueError:
            try:  # an ISO 8601 timestamp such as 2024-06-01T12:00:00Z
                value = datetime.fromisoformat(text).timestamp()
            except ValueError:
                raise SeriesError(where, f"expected a number or an ISO 8601 time, got {text[:40]!r}") from None
    if not math.isfinite(value):
        return None
    return value


def _bitmask(raw: object, where: str) -> int | None:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, bool):
        raise SeriesError(where, f"expected a bitmask, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    else:
        try:
            value = int(str(raw).strip(), 0)
        except ValueError:
            raise SeriesError(where, f"expected an integer bitmask (decimal or 0x hex), got {str(raw)[:40]!r}") from None
    if value < 0:
        raise SeriesError(where, f"a bitmask cannot be negative, got {value}")
    return value


def _pick(names: Iterable[str], wanted: tuple[str, ...]) -> str | None:
    lowered = {name.strip().lower(): name for name in names if isinstance(name, str)}
    return next((lowered[w] for w in wanted if w in lowered), None)


def _from_rows(rows: list[Mapping[str, Any]], source: str, row_label: str) -> list[SeriesPoint]:
    if not rows:
        raise SeriesError(source, "no data points")
    columns = list(rows[0].keys())
    time_col = _pick(columns, TIME_COLUMNS)
    value_col = _pick(columns, VALUE_COLUMNS)
    if time_col is None or value_col is None:
        missing = "a time column (seconds)" if time_col is None else "a value column (mfu)"
        raise SeriesError(source, f"needs {missing}; columns are {', '.join(map(str, columns)) or 'none'} "
                                  f"(expected one of {', '.join(TIME_COLUMNS)} and one of {', '.join(VALUE_COLUMNS)})")
    throttle_col = _pick(columns, THROTTLE_COLUMNS)
    event_col = _pick(columns, EVENT_COLUMNS)
    points = []
    for index, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise SeriesError(f"{source}: {row_label} {index}", "must be an object with seconds and mfu")
        where = f"{source}: {row_label} {index}"
        seconds = _number(row.get(time_col), f"{where}, {time_col}")
        if seconds is None:
            continue  # a row without a time cannot be placed; it counts as missing
        event = row.get(event_col) if event_col else None
        points.append(SeriesPoint(
            seconds=seconds,
            value=_number(row.get(value_col), f"{where}, {value_col}"),
            throttle=_bitmask(row.get(throttle_col), f"{where}, {throttle_col}") if throttle_col else None,
            event=str(event).strip() or None if event not in (None, "") else None,
        ))
    return points


def _from_prometheus(doc: Mapping[str, Any], source: str) -> list[SeriesPoint]:
    result = doc.get("data", {}).get("result") if isinstance(doc.get("data"), Mapping) else None
    if not isinstance(result, list) or not result:
        raise SeriesError(f"{source}: data.result", "a Prometheus answer needs at least one series in data.result")
    if len(result) > 1:
        raise SeriesError(f"{source}: data.result", f"has {len(result)} series; narrow the query to one (e.g. avg by ())")
    values = result[0].get("values") if isinstance(result[0], Mapping) else None
    if not isinstance(values, list):
        raise SeriesError(f"{source}: data.result[0].values", "must be a list of [timestamp, value] pairs (a range query)")
    points = []
    for index, pair in enumerate(values):
        if not isinstance(pair, list) or len(pair) != 2:
            raise SeriesError(f"{source}: data.result[0].values[{index}]", "must be a [timestamp, value] pair")
        seconds = _number(pair[0], f"{source}: values[{index}][0]", allow_empty=False)
        assert seconds is not None
        points.append(SeriesPoint(seconds=seconds, value=_number(pair[1], f"{source}: values[{index}][1]")))
    return points


def parse_text(text: str, source: str = "series", fmt: str | None = None) -> list[SeriesPoint]:
    """Points from CSV or JSON text; ``fmt`` is ``csv``, ``json`` or None to detect."""
    if len(text.encode("utf-8", "ignore")) > MAX_BYTES:
        raise SeriesError(source, f"is larger than {MAX_BYTES:,} bytes")
    stripped = text.lstrip()
    if not stripped:
        raise SeriesError(source, "is empty")
    if fmt == "json" or (fmt is None and stripped[0] in "[{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SeriesError(source, f"not valid JSON: {exc.msg} at line {exc.lineno}") from None
        return parse_json(doc, source)
    # newline="": the csv module reads the line ends itself, a bare carriage return included
    reader = csv.DictReader(io.StringIO(stripped, newline=""))
    try:
        if not reader.fieldnames:
            raise SeriesError(source, "CSV needs a header row such as 'seconds,mfu'")
        rows: list[Mapping[str, Any]] = list(reader)
    except csv.Error as exc:
        raise SeriesError(source, f"not readable as CSV (line {reader.line_num}: {exc})") from None
    for index, row in enumerate(rows, 1):
        if None in row:  # DictReader files the cells past the header under None
            raise SeriesError(f"{source}: row {index}", f"has more cells than the header's {len(reader.fieldnames)} "
                                                        f"({', '.join(reader.fieldnames)[:80]})")
    return _from_rows(rows, source, "row")


def parse_json(doc: object, source: str = "series") -> list[SeriesPoint]:
    if isinstance(doc, Mapping) and "data" in doc and "status" in doc:
        return _from_prometheus(doc, source)
    if isinstance(doc, Mapping) and "points" in doc:
        doc = doc["points"]
    if not isinstance(doc, list):
        raise SeriesError(source, "JSON must be a list of points, {\"points\": [...]}, or a Prometheus range-query answer")
    rows = [r if isinstance(r, Mapping) else {} for r in doc]
    for index, row in enumerate(doc, 1):
        if not isinstance(row, Mapping):
            raise SeriesError(f"{source}: point {index}", "must be an object such as {\"seconds\": 0, \"mfu\": 0.9}")
    return _from_rows(rows, source, "point")


def read_file(path: str | Path) -> list[SeriesPoint]:
    file = Path(path)
    if not file.is_file():
        raise SeriesError(str(file), "no such file")
    if file.stat().st_size > MAX_BYTES:
        raise SeriesError(str(file), f"is larger than {MAX_BYTES:,} bytes")
    fmt = "json" if file.suffix.lower() == ".json" else "csv" if file.suffix.lower() in (".csv", ".tsv", ".txt") else None
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SeriesError(str(file), "is not UTF-8 text") from None
    return parse_text(text, str(file), fmt)


def build_series(points: list[SeriesPoint], expected: float | None = None, source: str = "series") -> Series:
    """Sort by time, divide by ``expected`` and check the values look like fractions of expected."""
    if expected is not None and (not math.isfinite(expected) or expected <= 0):
        raise SeriesError("expected", f"must be a positive number, got {expected}")
    if len(points) > MAX_POINTS:
        raise SeriesError(source, f"has {len(points):,} points; the limit is {MAX_POINTS:,} (downsample first)")
    ordered = sorted(points, key=lambda p: p.seconds)
    if expected is not None:
        ordered = [p.model_copy(update={"value": None if p.value is None else p.value / expected}) for p in ordered]
    values = sorted(p.value for p in ordered if p.value is not None)
    if values:
        median = values[len(values) // 2]
        if median > MAX_FRACTION:
            hint = "give the expected MFU (expected, or --expected on the command line)" if expected is None else "check the expected MFU"
            raise SeriesError(source, f"values look absolute (median {median:g}, over {MAX_FRACTION:g}× expected); {hint}")
        if values[0] < 0:
            raise SeriesError(source, f"MFU cannot be negative (found {values[0]:g})")
    return Series(points=ordered, has_throttle=any(p.throttle is not None for p in ordered),
                  has_events=any(p.event for p in ordered))
