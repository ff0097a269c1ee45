"""The diagnosis tables under ``data/diagnosis/``: series shapes and error-signal families.

Both are data, not code: a team adds a shape or an Xid meaning by editing YAML.
They are validated on load against their schema and against the vocabulary;
every problem is reported with the file, the field and the reason.  A library
directory without its own ``diagnosis/`` folder uses the bundled tables.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import TableError
from ..loader import read_yaml
from ..models import ConceptKind, Text
from ..paths import bundled_data_dir
from ..vocab import Vocabulary

DIAGNOSIS_DIR = "diagnosis"
SHAPES_FILE = "shapes.yaml"
SIGNALS_FILE = "signals.yaml"

# The features a shape rule may name (computed in shapes.py).
FEATURES = ("level", "good_level", "drift", "recovery", "dip_depth", "periodicity", "throttle_overlap")
FeatureName = Literal["level", "good_level", "drift", "recovery", "dip_depth", "periodicity", "throttle_overlap"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rule(_Strict):
    feature: FeatureName
    min: float | None = None
    max: float | None = None
    tolerance: float | None = Field(default=None, gt=0)
    missing: Literal["fail", "skip"] = "fail"
    why: Text | None = None

    @model_validator(mode="after")
    def _bounds(self) -> Rule:
        if self.min is None and self.max is None:
            raise ValueError("a rule needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class Shape(_Strict):
    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    label: Text
    description: Text
    rules: list[Rule] = Field(min_length=1)
    likely: Text
    symptoms: list[str] = Field(default_factory=list)
    causes: list[str] = Field(default_factory=list)
    components: list[str] = Field(default_factory=list)
    incidents: list[str] = Field(default_factory=list)


class ThrottleBit(_Strict):
    bit: int = Field(gt=0)
    name: str
    heat_or_power: bool

    @field_validator("bit")
    @classmethod
    def _one_bit(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"{value:#x} is not a single bit")
        return value


class ShapeTable(_Strict):
    version: Literal[1]
    tolerances: dict[FeatureName, float]
    missing_penalty: float = Field(gt=0, le=1)
    throttle_bits: list[ThrottleBit]
    shapes: list[Shape] = Field(min_length=1)

    @property
    def heat_or_power_mask(self) -> int:
        mask = 0
        for bit in self.throttle_bits:
            if bit.heat_or_power:
                mask |= bit.bit
        return mask

    def get(self, shape_id: str) -> Shape | None:
        return next((s for s in self.shapes if s.id == shape_id), None)


class Pattern(_Strict):
    regex: str
    code: str | None = Field(default=None, description="Fixed code when the regex has no (?P<code>...) group.")
    ignore_case: bool = False

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _code_source(self) -> Pattern:
        if self.code is None and "(?P<code>" not in self.regex:
            raise ValueError("needs a (?P<code>...) group or a fixed code")
        return self

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.regex, re.IGNORECASE if self.ignore_case else 0)


class Code(_Strict):
    code: str
    aliases: list[str] = Field(default_factory=list)
    name: str
    meaning: Text
    severity: Literal["info", "warning", "critical"] = "warning"
    symptoms: list[str] = Field(default_factory=list)
    causes: list[str] = Field(default_factory=list)
    components: list[str] = Field(default_factory=list)


class Family(_Strict):
    id: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
    label: Text
    patterns: list[Pattern] = Field(min_length=1)
    default: Text = Field(description="Meaning of a code the table does not list; {code} is replaced.")
    symptoms: list[str] = Field(default_factory=list)
    components: list[str] = Field(default_factory=list)
    codes: list[Code] = Field(default_factory=list)

    def lookup(self, code: str) -> Code | None:
        key = code.strip().lower()
        for entry in self.codes:
            if entry.code.lower() == key or key in (a.lower() for a in entry.aliases):
                return entry
        return None


class SignalTable(_Strict):
    version: Literal[1]
    families: list[Family] = Field(min_length=1)


def _problem_text(exc: ValidationError) -> list[tuple[str, str]]:
    found = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; see docs/diagnosis.md)"
        found.append((field, message))
    return found


def table_path(root: Path, name: str) -> Path:
    """``root/diagnosis/name``, or the bundled table when the library has none."""
    own = root / DIAGNOSIS_DIR / name
    return own if own.is_file() else bundled_data_dir() / DIAGNOSIS_DIR / name


def _read(path: Path) -> object:
    if not path.is_file():
        raise TableError(str(path), "missing diagnosis table")
    try:
        return read_yaml(path)
    except yaml.YAMLError as exc:
        raise TableError(str(path), f"not valid YAML: {exc}") from None


def _check_refs(path: Path, where: str, vocab: Vocabulary, refs: dict[str, list[str]], problems: list[str]) -> None:
    kinds = {"symptoms": ConceptKind.symptom, "causes": ConceptKind.cause, "components": ConceptKind.component}
    for field, ids in refs.items():
        for concept_id in ids:
            concept = vocab.get(concept_id)
            if concept is None or concept.kind != kinds[field]:
                hint = vocab.suggest(concept_id, kinds[field])
                problems.append(f"{where}.{field}: unknown {kinds[field].value} {concept_id!r}"
                                + (f" (did you mean {', '.join(hint)}?)" if hint else ""))


def _raise(path: Path, problems: list[str]) -> None:
    if problems:
        raise TableError(str(path), "; ".join(problems[:10]) + (f"; … and {len(problems) - 10} more" if len(problems) > 10 else ""))


def load_shapes(root: Path, vocab: Vocabulary, incident_ids: set[str]) -> ShapeTable:
    """The library's shape table, or the bundled one; a shape's example incidents must be in the library only when
    the table is its own (those of the bundled table that it lacks are not shown: ``analysis.mfu``)."""
    path = table_path(root, SHAPES_FILE)
    own = path.parent.parent.resolve() == root.resolve()
    try:
        table = ShapeTable.model_validate(_read(path))
    except ValidationError as exc:
        _raise(path, [f"{field}: {message}" for field, message in _problem_text(exc)])
        raise  # pragma: no cover - _raise always raises here
    problems: list[str] = []
    seen: set[str] = set()
    for index, shape in enumerate(table.shapes):
        where = f"shapes[{index}] ({shape.id})"
        if shape.id in seen:
            problems.append(f"{where}.id: duplicate shape id")
        seen.add(shape.id)
        _check_refs(path, where, vocab, {"symptoms": shape.symptoms, "causes": shape.causes, "components": shape.components}, problems)
        if own:  # the bundled table's examples are curated incidents, which a team's own library does not hold
            problems += [f"{where}.incidents: unknown incident {i!r}" for i in shape.incidents if i not in incident_ids]
    missing = [f for f in FEATURES if f not in table.tolerances]
    if missing:
        problems.append(f"tolerances: missing {', '.join(missing)}")
    _raise(path, problems)
    return table


def load_signals(root: Path, vocab: Vocabulary) -> SignalTable:
    path = table_path(root, SIGNALS_FILE)
    try:
        table = SignalTable.model_validate(_read(path))
    except ValidationError as exc:
        _raise(path, [f"{field}: {message}" for field, message in _problem_text(exc)])
        raise  # pragma: no cover
    problems: list[str] = []
    seen: set[str] = set()
    for index, family in enumerate(table.families):
        where = f"families[{index}] ({family.id})"
        if family.id in seen:
            problems.append(f"{where}.id: duplicate family id")
        seen.add(family.id)
        _check_refs(path, where, vocab, {"symptoms": family.symptoms, "components": family.components}, problems)
        codes: set[str] = set()
        for position, code in enumerate(family.codes):
            spot = f"{where}.codes[{position}] ({code.code})"
            for key in (code.code, *code.aliases):
                if key.lower() in codes:
                    problems.append(f"{spot}: code or alias {key!r} listed twice")
                codes.add(key.lower())
            _check_refs(path, spot, vocab, {"symptoms": code.symptoms, "causes": code.causes, "components": code.components}, problems)
    _raise(path, problems)
    return table
