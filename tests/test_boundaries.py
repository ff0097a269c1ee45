"""The adapters (CLI, HTTP API, MCP) go through the Library facade only."""

from __future__ import annotations

import ast
from pathlib import Path

import incidentlib

PACKAGE = Path(incidentlib.__file__).parent
ADAPTERS = [PACKAGE / "cli.py", PACKAGE / "cli_write.py", PACKAGE / "mcp_server.py", *sorted((PACKAGE / "api").glob("*.py")),
            *sorted((PACKAGE / "web").glob("*.py"))]
# The facade, the error hierarchy, the request rules and the shared response models;
# the package root (for __version__) and the adapters themselves.
ALLOWED = {
    "incidentlib",
    "incidentlib.library",
    "incidentlib.errors",
    "incidentlib.requests",
    "incidentlib.views",
    "incidentlib.mcp_server",
    "incidentlib.cli_write",
}


def module_name(path: Path) -> str:
    return "incidentlib." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def internal_imports(source: str, module: str) -> set[str]:
    """Every incidentlib module that ``source`` (the text of ``module``) imports, absolute or relative, anywhere."""
    package = module.removesuffix(".__init__") if module.endswith(".__init__") else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "incidentlib")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "incidentlib":
                continue
            if node.module is None:  # from . import x: x may be a submodule
                found.update(f"{target}.{a.name}" if f"{target}.{a.name}".removeprefix("incidentlib.") in SUBMODULES
                             else target for a in node.names)
            else:
                found.add(target)
    return found


SUBMODULES = {
    ".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in PACKAGE.rglob("*.py")
} | {".".join(p.relative_to(PACKAGE).parts) for p in PACKAGE.rglob("*") if p.is_dir()}


def allowed(name: str) -> bool:
    return name in ALLOWED or any(name == f"incidentlib.{adapter}" or name.startswith(f"incidentlib.{adapter}.")
                                  for adapter in ("api", "web"))


def test_adapters_import_only_the_facade() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in internal_imports(path.read_text(encoding="utf-8"), module_name(path))
                                                if not allowed(n))
        for path in ADAPTERS
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert offenders == {}, f"adapters import package internals: {offenders}"


def test_the_check_sees_relative_and_absolute_imports() -> None:
    # the checker itself must be able to fail: internal imports, written every way, are reported
    probe = PACKAGE / "api" / "routes_search.py"
    names = internal_imports(probe.read_text(encoding="utf-8"), module_name(probe))
    assert "incidentlib.library" in names and "incidentlib.requests" in names
    source = (
        "from ..search.engine import SearchMode\n"
        "import incidentlib.graph.knowledge\n"
        "def f():\n    from .. import loader\n"
    )
    found = internal_imports(source, "incidentlib.api.probe")
    assert {"incidentlib.search.engine", "incidentlib.graph.knowledge", "incidentlib.loader"} <= found
    assert not any(allowed(n) for n in found)


def undocumented_public_methods(cls: type) -> list[str]:
    """Public callables and properties defined on ``cls`` itself that carry no docstring."""
    missing = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        function = getattr(member, "__func__", None) or getattr(member, "fget", None) or getattr(member, "func", None) \
            or member
        if callable(function) and not (function.__doc__ or "").strip():
            missing.append(name)
    return missing


def test_every_public_library_method_says_what_it_does() -> None:
    from incidentlib import Library

    assert undocumented_public_methods(Library) == []

    class Probe:  # the check itself can fail
        def documented(self) -> None:
            """Yes."""

        def bare(self) -> None:
            pass

    assert undocumented_public_methods(Probe) == ["bare"]
