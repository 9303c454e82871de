"""The line the house is built on: proxy/core imports no I/O library, no settings and nothing of the
edge, and no module of the proxy imports itself back at load time (a runtime import cycle).

(One exception is allowed, and stated in docs/architecture.md: the loaders of the configuration
files — providers.yaml, the routes file, the tool titles — read their file at start-up with
pathlib; nothing in the core reads a file, a socket or the clock per request.)

Read from the sources (ast), so a lazy import inside a function counts for purity too, while only
module-level imports (outside `if TYPE_CHECKING:`) count for cycles: they are what runs at load.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROXY = ROOT / "proxy"
# Libraries that do I/O or hold process state the core must not touch, and the edge packages.
FORBIDDEN = (
    "starlette",
    "aiohttp",
    "httpx",
    "redis",
    "uvicorn",
    "asyncio",
    "socket",
    "logging",
    "opentelemetry",
    "prometheus_client",
    "threading",
    "subprocess",
    "ssl",
    "concurrent",
    "urllib.request",
    "http.client",
    "importlib",  # (a dynamic import would hide any of these from this test)
    "proxy.settings",
    "proxy.server",
    "proxy.console",
    "proxy.state",
    "proxy.telemetry",
    "proxy.review",
    "proxy.mock",
    "proxy.cli",
    "proxy.demo",
    "proxy.explain",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(module: str) -> bool:
    return (ROOT / module.replace(".", "/") / "__init__.py").exists()


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(node: ast.Import | ast.ImportFrom, module: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package (a package is its own)
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package(module) else 0)
        package = parts[:keep]
        base = ".".join([*package, base] if base else package)
    yield base
    for alias in node.names:  # `from proxy.core import plan` imports the module proxy.core.plan
        yield f"{base}.{alias.name}"


def all_imports(tree: ast.Module, module: str) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name in imported(node, module):
                yield name, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            yield "importlib", node.lineno  # (a dynamic import, whatever it names)


def load_time_imports(body: list[ast.stmt], module: str, modules: Collection[str]) -> Iterator[str]:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = list(imported(node, module))
            if isinstance(node, ast.ImportFrom) and all(name in modules for name in names[1:]):
                # `from package import submodule`: the package is already being imported (or
                # done), so only the submodules are loaded here.
                names = names[1:]
            yield from names
        elif isinstance(node, ast.If) and not is_type_checking(node):
            yield from load_time_imports(node.body + node.orelse, module, modules)
        elif isinstance(node, ast.Try):
            handlers = [stmt for handler in node.handlers for stmt in handler.body]
            yield from load_time_imports(node.body + handlers + node.orelse + node.finalbody, module, modules)
        elif isinstance(node, ast.With):
            yield from load_time_imports(node.body, module, modules)


def sources() -> dict[str, ast.Module]:
    return {module_name(path): ast.parse(path.read_text(encoding="utf-8")) for path in PROXY.rglob("*.py")}


def test_the_core_imports_no_io_library_no_settings_and_no_edge() -> None:
    found = []
    for path in sorted((PROXY / "core").rglob("*.py")):
        module = module_name(path)
        for name, line in all_imports(ast.parse(path.read_text(encoding="utf-8")), module):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not found, "the core must stay pure:\n" + "\n".join(found)


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_runtime_import_cycle() -> None:
    trees = sources()
    graph = {
        module: {
            name for name in load_time_imports(tree.body, module, trees) if name in trees and name != module
        }
        for module, tree in trees.items()
    }
    assert find_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def forbidden(names: list[str]) -> bool:
    return any(any(n == f or n.startswith(f + ".") for f in FORBIDDEN) for n in names)


@pytest.mark.parametrize(
    "bad",
    [
        "import socket",
        "from proxy.settings import Settings",
        "import logging",
        "import importlib; importlib.import_module('asyncio')",
        "__import__('asyncio')",
        "from urllib.request import urlopen",
    ],
)
def test_the_purity_check_sees_an_import_anywhere_in_a_module(bad: str) -> None:
    source = f"def lazy() -> None:\n    {bad}\n"
    assert forbidden([name for name, _ in all_imports(ast.parse(source), "proxy.core.x")])


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("proxy.core", "from .. import settings"),  # the package itself: `..` is proxy
        ("proxy.core.stream", "from ...server import relay"),
        ("proxy.core.plan", "from .. import settings"),
        ("proxy.core.stream.sse", "from ...server.relay import Relay"),
    ],
)
def test_relative_imports_resolve_in_packages_and_modules(module: str, source: str) -> None:
    assert forbidden([name for name, _ in all_imports(ast.parse(source), module)])
