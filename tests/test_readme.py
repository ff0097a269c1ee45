"""The README's numbers and example output agree with the bundled library they describe."""

from __future__ import annotations

import re

from conftest import REPO

from incidentlib import Library


def test_readme_counts_match_the_bundled_library(library: Library) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [count] = re.findall(r"(\d+) publicly documented incidents", readme)
    assert int(count) == len(library)
    block = readme[readme.index("$ incidentlib topic InfiniBand --lang ko"):]
    block = block[:block.index("\n$ ", 1)]
    page = library.topic("InfiniBand", lang="ko")
    assert f"{page.label} (component {page.id})" in block
    assert f"also: {', '.join(page.alt_labels)}" in block
    [shown] = re.findall(r"(\d+) incident\(s\)", block)
    assert int(shown) == len(page.incidents)
    listed = re.findall(r"^  (IL-\d{4}) ", block, flags=re.MULTILINE)
    assert listed == [i.id for i in page.incidents[:len(listed)]]
