"""Records with live changes laid over them (incidentlib.overlaid): a mapping in id order that reads only what changed."""

from __future__ import annotations

import pytest

from incidentlib.loader import each_record, load_library
from incidentlib.overlaid import OverlaidRecords


def test_changes_laid_over_records_read_as_the_dict_they_stand_for(data_dir) -> None:
    records = dict(list(load_library(data_dir).incidents.items())[:12])
    ids = list(records)
    first = OverlaidRecords(records, {ids[3]: None, "IL-9000": records[ids[0]].model_copy(update={"id": "IL-9000"}),
                                      ids[5]: records[ids[6]].model_copy(update={"id": ids[5]})})
    second = OverlaidRecords(first, {ids[3]: records[ids[3]], ids[7]: None, "IL-0000": records[ids[1]].model_copy(update={"id": "IL-0000"})})
    expected = dict(records)
    expected.pop(ids[7])
    expected[ids[5]] = second[ids[5]]
    expected["IL-9000"], expected["IL-0000"] = second["IL-9000"], second["IL-0000"]
    expected = dict(sorted(expected.items()))
    assert second.base is records  # laid over the first base, the changes joined
    assert list(second) == list(expected) and len(second) == len(expected)
    assert dict(second.items()) == expected
    assert [record.id for record in each_record(second)] == list(expected)  # the scan, in id order too
    assert second[ids[5]].title == records[ids[6]].title and ids[7] not in second and ids[3] in second
    with pytest.raises(KeyError):
        second[ids[7]]
    assert ids[3] not in first and list(first) == sorted({*ids, "IL-9000"} - {ids[3]})


def test_a_scan_follows_the_iteration_order_whatever_the_base_order(data_dir) -> None:
    records = list(load_library(data_dir).incidents.values())[:8]
    base = {r.id: r for r in reversed(records)}  # not in id order: a mapping someone built by hand
    changes = {records[2].id: None, records[4].id: records[0], "IL-0000": records[1].model_copy(update={"id": "IL-0000"}),
               "IL-9999": records[1].model_copy(update={"id": "IL-9999"})}
    overlaid = OverlaidRecords(base, changes)
    assert [r.id for r in each_record(overlaid)] == [overlaid[i].id for i in overlaid]
    assert set(overlaid) == ({r.id for r in records} - {records[2].id}) | {"IL-0000", "IL-9999"}
