"""incidentlib: a bilingual knowledge graph and semantic search over infrastructure incidents."""

from .errors import LibraryError
from .library import IncidentFilter, IncidentNotFound, Library
from .loader import Problem, load_library
from .models import Concept, Incident

__version__ = "0.1.0"

__all__ = [
    "Concept",
    "Incident",
    "IncidentFilter",
    "IncidentNotFound",
    "Library",
    "LibraryError",
    "Problem",
    "__version__",
    "load_library",
]
