"""One shared "fields set" per distinct set of given fields, across a library's loaded records.

Every pydantic model instance carries ``__pydantic_fields_set__``, the names of the fields its input gave: a
Python ``set`` of its own, 216 bytes or more even when it holds two names.  An incident is about 14 model
instances (its texts, sources, signals, related links), so those sets weigh about 4 KB of the ~17 KB a loaded
record's live Python objects take (measured with ``tracemalloc`` on the bundled records), about 0.4 GB at 100k
records, for what is a handful of distinct values (23 over the bundled library).  ``bench/bench_records_memory.py``
measures the whole effect on a process's RSS (docs/benchmarks.md, "Loaded records").

:class:`FieldSetSharer` makes the instances whose sets are equal hold one and the same set object.  That is
safe because every stored record is frozen (``models.Record``): pydantic adds to a model's own set only when a
field is assigned, which a frozen model refuses before touching the set, and ``model_copy`` gives the copy a
set of its own before it adds the updated names.  ``model_fields_set``, equality, dumps and copies are
unchanged (``tests/test_field_sets.py``).

Sharing must happen as records are made, not once they all exist: a freed set leaves a hole in the
allocator's pools that only another object of the same size fills, so sets freed after the last record was
validated give no memory back to the system.  The loader therefore shares each record as it is validated,
and the start snapshot validates its records in parts and shares each part (the sharer keeps the shared
sets from one call to the next); the next part's sets then take the freed ones' place.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable

from pydantic import BaseModel

__all__ = ["FieldSetSharer"]


def _plan(model: type[BaseModel]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """Whether ``model`` is frozen; its fields that may hold one model; its fields that may hold a list of models."""

    def holds_model(annotation: object) -> bool:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return True
        return any(holds_model(argument) for argument in typing.get_args(annotation))

    single: list[str] = []
    listed: list[str] = []
    for name, info in model.model_fields.items():
        if holds_model(info.annotation):
            (listed if typing.get_origin(info.annotation) is list else single).append(name)
    return bool(model.model_config.get("frozen")), tuple(single), tuple(listed)


class FieldSetSharer:
    """Shares fields sets across every call of :meth:`share`: records validated in batches are shared batch by
    batch, so the sets a batch frees are reused by the next batch's instead of growing the heap (module docstring).
    Models that are not frozen keep their own sets (they may still be assigned to); the models nested in them are
    shared all the same."""

    def __init__(self) -> None:
        self._canonical: dict[frozenset[str], set[str]] = {}
        # most instances of a class were given the same fields as the one before: compared first, no frozenset made
        self._last_of_class: dict[type[BaseModel], set[str]] = {}
        self._plans: dict[type[BaseModel], tuple[bool, tuple[str, ...], tuple[str, ...]]] = {}  # _plan's, per class

    @property
    def distinct(self) -> int:
        """Distinct fields-set values shared so far."""
        return len(self._canonical)

    def share(self, records: Iterable[BaseModel]) -> None:
        """Make ``records`` and the models nested in them hold the shared set equal to their own."""
        canonical, last_of_class, plans = self._canonical, self._last_of_class, self._plans
        set_attribute = object.__setattr__  # frozen models refuse their own __setattr__
        pending = list(records)
        while pending:
            model = pending.pop()
            cls = type(model)
            plan = plans.get(cls)
            if plan is None:
                plan = plans[cls] = _plan(cls)
            frozen, single, listed = plan
            if frozen:
                own = model.__pydantic_fields_set__
                shared = last_of_class.get(cls)
                if shared is None or shared != own:
                    shared = last_of_class[cls] = canonical.setdefault(frozenset(own), own)
                if shared is not own:
                    set_attribute(model, "__pydantic_fields_set__", shared)
            if single or listed:
                values = model.__dict__
                for name in single:
                    value = values[name]
                    if value is not None:
                        pending.append(value)
                for name in listed:
                    pending.extend(values[name])

