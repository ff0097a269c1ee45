"""Bring other people's incident collections into a library directory (``incidentlib import``)."""

from .mapping import FieldMap, MappingError
from .pipeline import ImportFailed, ImportOptions, ImportReport, run_import
from .readers import ImportFormat, ReadError

__all__ = ["FieldMap", "ImportFailed", "ImportFormat", "ImportOptions", "ImportReport", "MappingError", "ReadError", "run_import"]
