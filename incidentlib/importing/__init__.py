"""Bring other people's incident collections into a library directory (``incidentlib import``)."""

from ..errors import ImportFailed, MappingError, ReadError
from .mapping import FieldMap
from .pipeline import ImportOptions, ImportReport, run_import, validation_reasons
from .readers import ImportFormat

__all__ = ["FieldMap", "ImportFailed", "ImportFormat", "ImportOptions", "ImportReport", "MappingError", "ReadError", "run_import",
           "validation_reasons"]
