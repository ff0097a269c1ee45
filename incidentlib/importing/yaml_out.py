"""Records written as YAML files: libyaml's emitter, with the nodes of plain JSON-like documents made directly.

An import writes tens of thousands of record files, and most of a dump's time in Python is PyYAML's generic
representer (a memo of every object for anchors, a method looked up per value) and the resolver it asks twice per
scalar.  The documents written here hold only ``dict``, ``list``, ``str`` and scalars, so :class:`RecordDumper`:

- makes the node of a ``str``, ``dict`` or ``list`` directly (any other value goes through the safe representer);
- never writes an anchor and alias: a list that appears twice in a document is written twice, as a reader of a
  record file expects (the generic representer would write ``&id001`` for a repeated object);
- remembers the implicit tag of short scalars (keys such as ``en``, ``ko``, ``title`` recur in every record):
  whether a plain scalar would read back as something other than a string depends on its text alone, as long as no
  path resolver is registered (none is; with one, the safe resolver answers), and a scalar whose plain form is not
  asked about is a string.

The text written is the safe dumper's for every document without a repeated object (tests/test_fast_paths.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# libyaml's emitter: 13× the pure-Python one on the bundled records, and the same files (tests/test_fast_paths.py); it
# writes a character beyond the BMP (an emoji) escaped, and may fold a long double-quoted string at other places (4 of
# 592 imported records, docs/benchmarks.md): both read back as the same values
try:
    _BASE_DUMPER: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _BASE_DUMPER = yaml.SafeDumper

STR_TAG = "tag:yaml.org,2002:str"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
#: Scalars at most this long have their implicit tag remembered: field names, language keys, dates, short labels
#: recur across records; long texts do not, and would only fill the memo.
REMEMBERED_SCALAR_CHARS = 32
#: Bound of the memo: the distinct short scalars of a collection (ids, names) are unbounded; the recurring ones are
#: among the first few thousand seen.
REMEMBERED_SCALARS = 8_192
LINE_WIDTH = 100  # the width the library's files are written at


class RecordDumper(_BASE_DUMPER):  # type: ignore[misc]
    """The safe dumper, with the shortcuts of the module docstring."""

    _implicit_tags: ClassVar[dict[str, str]] = {}  # shared by every dump: the recurring scalars recur across records

    def represent_data(self, data: Any) -> Node:
        kind = type(data)
        if kind is str:
            return ScalarNode(STR_TAG, data)
        if kind is dict:
            node = self.represent_data
            return MappingNode(MAP_TAG, [(node(key), node(value)) for key, value in data.items()], flow_style=False)
        if kind is list:
            node = self.represent_data
            return SequenceNode(SEQ_TAG, [node(item) for item in data], flow_style=False)
        represented: Node = super().represent_data(data)
        return represented

    def ignore_aliases(self, data: Any) -> bool:
        return True

    # with no path resolver registered (none is) there is nothing to track while descending into a node
    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        if self.yaml_path_resolvers:
            super().descend_resolver(current_node, current_index)

    def ascend_resolver(self) -> None:
        if self.yaml_path_resolvers:
            super().ascend_resolver()

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not ScalarNode or self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)
        if not implicit[0]:  # asked of every scalar: with no implicit resolver to try, a scalar is a string
            return self.DEFAULT_SCALAR_TAG
        if len(value) <= REMEMBERED_SCALAR_CHARS:
            tags = RecordDumper._implicit_tags
            tag = tags.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(tags) < REMEMBERED_SCALARS:
                    tags[value] = tag
            return tag
        return super().resolve(kind, value, implicit)


def dump_record(document: dict[str, Any]) -> str:
    """``document`` as the text of a record file (keys in their order, Unicode as is, lines folded at 100)."""
    return str(yaml.dump(document, Dumper=RecordDumper, allow_unicode=True, sort_keys=False, width=LINE_WIDTH))


def encoded_records(documents: list[dict[str, Any]]) -> list[bytes]:
    """The file of each document (:func:`dump_record`) as the UTF-8 bytes written: a worker's batch, encoded where it
    is dumped."""
    return [dump_record(document).encode("utf-8") for document in documents]
