"""Concepts for records nobody tagged: inferred components, causes and symptoms with provenance."""

from .classifier import ConceptClassifier, training_examples
from .tagger import ConceptTagger, incident_text

__all__ = ["ConceptClassifier", "ConceptTagger", "incident_text", "training_examples"]
