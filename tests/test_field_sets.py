"""Loaded records share one fields-set object per distinct value, and nothing observable about them changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import small_library
from pydantic import BaseModel, ValidationError

from incidentlib.field_sets import FieldSetSharer
from incidentlib.library import Library
from incidentlib.loader import load_library
from incidentlib.models import Incident, Text
from incidentlib.search.engine import SearchConfig

IDS = ["IL-0021", "IL-0025", "IL-0126", "IL-0133"]


def models_in(record: BaseModel) -> list[BaseModel]:
    """``record`` and every model nested in it, depth first."""
    found = [record]
    for value in record.__dict__.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                found.extend(models_in(item))
    return found


def field_set_objects(records: list[Incident]) -> tuple[int, int]:
    """(distinct fields-set objects, distinct fields-set values) over ``records`` and their nested models."""
    sets = [model.__pydantic_fields_set__ for record in records for model in models_in(record)]
    return len({id(s) for s in sets}), len({frozenset(s) for s in sets})


def validated_twice(library_dir: Path) -> tuple[list[Incident], list[Incident]]:
    records = list(load_library(library_dir).incidents.values())
    documents = [record.model_dump(mode="json", exclude_unset=True) for record in records]
    return ([Incident.model_validate(document) for document in documents],
            [Incident.model_validate(document) for document in documents])


def test_equal_sets_become_one_object_and_the_records_are_unchanged(data_dir: Path) -> None:
    shared, reference = validated_twice(data_dir)
    objects, values = field_set_objects(shared)
    assert objects > values  # pydantic gives every instance its own set
    sharer = FieldSetSharer()
    sharer.share(shared)
    assert sharer.distinct == values
    assert field_set_objects(shared) == (values, values)
    assert shared == reference
    for record, same in zip(shared, reference, strict=True):
        for model, twin in zip(models_in(record), models_in(same), strict=True):
            assert model.model_fields_set == twin.model_fields_set
        assert record.model_dump(exclude_unset=True) == same.model_dump(exclude_unset=True)
        assert record.model_dump_json(exclude_defaults=True) == same.model_dump_json(exclude_defaults=True)


def test_a_shared_set_is_never_changed_through_one_record(data_dir: Path) -> None:
    records, _ = validated_twice(data_dir)
    FieldSetSharer().share(records)
    first, second = records[0], records[1]
    assert first.title.__pydantic_fields_set__ is second.title.__pydantic_fields_set__
    title_fields, record_fields = set(second.title.model_fields_set), set(first.model_fields_set)
    with pytest.raises(ValidationError):  # frozen: refused before pydantic would add to the set
        first.title.en = "changed"  # type: ignore[misc]
    changed = first.model_copy(update={"severity": "sev1"})
    assert changed.model_fields_set == record_fields | {"severity"}
    assert first.model_fields_set == record_fields
    assert second.title.model_fields_set == title_fields
    assert changed.__pydantic_fields_set__ is not first.__pydantic_fields_set__  # a copy has a set of its own


def test_models_that_may_be_assigned_keep_their_own_sets() -> None:
    class Open(BaseModel):
        text: Text
        note: str = ""

    one, two = Open(text=Text(en="a")), Open(text=Text(en="b"))
    sharer = FieldSetSharer()
    sharer.share([one, two])
    assert sharer.distinct == 1  # the frozen Text instances only
    assert one.__pydantic_fields_set__ is not two.__pydantic_fields_set__
    assert one.text.__pydantic_fields_set__ is two.text.__pydantic_fields_set__
    one.note = "assigned"
    assert "note" in one.model_fields_set and "note" not in two.model_fields_set


def test_the_loader_shares_them_from_yaml_and_from_the_start_snapshot(tmp_path: Path, data_dir: Path) -> None:
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    first = Library.open(root, SearchConfig(cache_dir=cache))
    objects, values = field_set_objects(list(first.data.incidents.values()))
    assert objects == values
    _ = first._search_engine.chunks
    assert first.save_start_snapshot()
    again = Library.open(root, SearchConfig(cache_dir=cache))
    assert again.data.chunks is not None  # read from the snapshot this time
    assert field_set_objects(list(again.data.incidents.values())) == (values, values)
    assert again.data.incidents == first.data.incidents
