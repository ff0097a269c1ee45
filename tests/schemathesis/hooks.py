"""Schemathesis hooks for the contract test: SPARQL query bodies are plain UTF-8 text."""

import schemathesis

schemathesis.serializer.alias("application/sparql-query", "text/plain")
