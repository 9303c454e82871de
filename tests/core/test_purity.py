"""The lines the house is built on, read from the sources (ast):

- proxy/core imports only what its allowlist names (ALLOWED below): no I/O library, no settings,
  nothing of the edge. An allowlist, not a deny list: a new import into the core is a decision
  written down here with its reason, not a name somebody forgot to forbid.
- The layers (LAYERS below): a capability package (policy, review, state, telemetry, console)
  never imports the server edge; the settings and the simulated upstream import only the core.
- No module of the proxy imports itself back at load time (a runtime import cycle).

(One exception to the core's purity is allowed, and stated in docs/architecture.md: the loaders of
the configuration files — providers.yaml, the routes file with its `.env`, the tool titles — read
their file at start-up; nothing in the core reads a file, a socket or the clock per request.)

A lazy import inside a function counts for purity and layering, while only module-level imports
(outside `if TYPE_CHECKING:`) count for cycles: they are what runs at load.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROXY = ROOT / "proxy"

# What a module of proxy/core may import (a name and everything under it), with the reason. Derived
# from the code as it stood (2026-12-05) and kept explicit: whatever is not here is refused —
# os, sys, io, time, shutil, tempfile, asyncio, threading, subprocess, socket, ssl, logging,
# importlib, urllib.request, http, starlette, aiohttp, httpx, redis, uvicorn, prometheus_client,
# opentelemetry, and every proxy package outside the core. (pathlib, dotenv and secrets are here
# for a few modules only: ONLY_IN.)
ALLOWED: dict[str, str] = {
    "proxy.core": "the core itself",
    # The standard library's pure parts: values in, values out.
    "__future__": "annotations",
    "typing": "annotations, protocols, NamedTuple",
    "types": "MappingProxyType: read-only tables",
    "collections": "deque, and collections.abc for the types",
    "dataclasses": "the value types",
    "enum": "StrEnum: control-header values, trace stages",
    "functools": "lru_cache, partial",
    "itertools": "repeat, takewhile: a run's events tested in C, not a Python step each (stream.run_texts)",
    "operator": "and_, itemgetter: the same (stream.run_texts)",
    "copy": "deepcopy: the review gate keeps the held original as it came",
    "math": "ceil: budget buckets (budgets)",
    "re": "patterns: reasoning tags, headers, globs compiled once",
    "fnmatch": "model and tool-name globs",
    "json": "the standard codec where orjson refuses (stream.jsonio: lone surrogates, big integers)",
    "base64": "blobs written as text (seal)",
    "binascii": "its decoding error (seal)",
    "struct": "the sealed blob's header (seal)",
    "zlib": "compressing before sealing (seal)",
    "hashlib": "store keys and tenant hashes (replay_keys), harmony's call ids",
    "hmac": "constant-time key comparison (gateway)",
    "ipaddress": "address patterns (url_patterns)",
    "urllib.parse": "URL splitting and quoting (paths, routing, plan) — not urllib.request",
    "datetime": "the `verified:` date of a providers.yaml entry, a value (the clock is never read)",
    # Libraries that do no I/O.
    "orjson": "the JSON codec of the hot path",
    "yaml": "parsing the operator's YAML text (yamlfile, policy_file); the file is read by the loaders",
    "pydantic": "the config files' schemas (providers, routes, policy, front-door rules)",
    "cryptography": "AEAD and HKDF for the sealed blobs (seal)",
    "secrets": "the sealed blob's random nonce (see ONLY_IN)",
    "pathlib": "the start-up loaders' files (see ONLY_IN)",
    "dotenv": "the `.env` file route keys may come from, read at start-up (see ONLY_IN)",
}
# Names on the allowlist that only some modules may import, by module name (its last part, so the
# rule survives a module moving between folders of the core): the start-up loaders' files (the one
# exception above), and the seal's one outside input.
ONLY_IN: dict[str, frozenset[str]] = {
    "pathlib": frozenset({"providers", "routing", "tool_titles"}),
    "dotenv": frozenset({"routing"}),
    "secrets": frozenset({"seal"}),
}

# The layers, by top-level name under proxy/: which others each may import. The core is held above
# (its allowlist); the entry points on top (cli, demo + demo_doors, explain, simulated,
# build_info) may import anything. A new top-level package or module must be placed here: the
# test names it.
CAPABILITIES = frozenset({"policy", "review", "state", "telemetry", "console", "sessions"})
ENTRY_POINTS = frozenset({"cli", "demo", "demo_doors", "explain", "simulated", "build_info"})
LAYERS: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "settings": frozenset({"core"}),
    # Test equipment: speaks each provider's wire, knows nothing of the proxy around the core.
    "mock": frozenset({"core"}),
    **{name: frozenset({"core", "settings"} | CAPABILITIES) for name in CAPABILITIES},
    "server": frozenset({"core", "settings"} | CAPABILITIES),
}
# Imports that break the layers today, each with its reason: found, not endorsed. The test fails
# when one is no longer needed, so the list only shrinks.
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}


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
    for alias in node.names:  # `from proxy.core import plan` imports the module proxy.core.plan.request
        yield f"{base}.{alias.name}"


def all_imports(tree: ast.Module, module: str) -> Iterator[tuple[str, int]]:
    """Every name a module imports, anywhere in it. `from package import name` counts as
    `package.name` only: `from urllib import request` is urllib.request, not the harmless urllib."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            for name in list(imported(node, module))[1:]:
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


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def refused(name: str, module: str) -> bool:
    """Whether a module of the core may not import `name` (ALLOWED, ONLY_IN)."""
    allowed = [prefix for prefix in ALLOWED if within(name, prefix)]
    if not allowed:
        return True
    only = ONLY_IN.get(max(allowed, key=len))
    return only is not None and module.rsplit(".", 1)[-1] not in only


def test_the_core_imports_only_its_allowlist() -> None:
    found = []
    for path in sorted((PROXY / "core").rglob("*.py")):
        module = module_name(path)
        for name, line in all_imports(ast.parse(path.read_text(encoding="utf-8")), module):
            if refused(name, module):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not found, (
        "the core must stay pure; an import it really needs is added to ALLOWED in "
        "tests/core/test_purity.py with its reason:\n" + "\n".join(found)
    )


def test_every_allowlisted_name_is_still_used() -> None:
    """The allowlist says what the core uses, not what it might: a name no longer imported goes."""
    used = {
        max((prefix for prefix in ALLOWED if within(name, prefix)), key=len, default="")
        for path in (PROXY / "core").rglob("*.py")
        for name, _ in all_imports(ast.parse(path.read_text(encoding="utf-8")), module_name(path))
    }
    assert set(ALLOWED) - used == set()


def layer_of(name: str) -> str | None:
    """The top-level part of proxy/ a dotted name is in (None outside the proxy); the package's
    own `__init__` (`proxy.__version__`) is "proxy"."""
    parts = name.split(".")
    if parts[0] != "proxy":
        return None
    if len(parts) > 1 and ((PROXY / parts[1]).is_dir() or (PROXY / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "proxy"


def layer_violations(tree: ast.Module, module: str) -> Iterator[tuple[str, int]]:
    """The imports of `module` its layer may not make (LAYERS), exceptions included."""
    allowed = LAYERS.get(layer_of(module) or "")
    if allowed is None:  # an entry point, or the package's own __init__
        return
    for name, line in all_imports(tree, module):
        layer = layer_of(name)
        if layer is not None and layer not in {"proxy", layer_of(module)} and layer not in allowed:
            yield name, line


def test_every_top_level_package_is_in_a_layer() -> None:
    tops = {p.name for p in PROXY.iterdir() if (p / "__init__.py").exists()}
    tops |= {p.stem for p in PROXY.glob("*.py") if p.stem != "__init__"}
    assert tops - set(LAYERS) - ENTRY_POINTS == set(), "place it in LAYERS (tests/core/test_purity.py)"


def test_each_layer_imports_only_the_layers_it_may() -> None:
    """Capabilities never import the server edge; settings and the mock import only the core."""
    found, excused = [], set()
    for path in sorted(PROXY.rglob("*.py")):
        module = module_name(path)
        for name, line in layer_violations(ast.parse(path.read_text(encoding="utf-8")), module):
            excuse = [key for key in LAYER_EXCEPTIONS if key[0] == module and within(name, key[1])]
            if excuse:
                excused.update(excuse)
            else:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    where = "LAYERS in tests/core/test_purity.py"
    assert not found, f"a layer imports one it may not ({where}):\n" + "\n".join(found)
    assert set(LAYER_EXCEPTIONS) - excused == set(), "no longer needed: remove from LAYER_EXCEPTIONS"


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        ("proxy.review.hub", "def f() -> None:\n    from proxy.server.relay import Relay", True),
        ("proxy.telemetry.otel", "from ..server import handlers", True),
        ("proxy.state.memory", "from proxy.cli import main", True),
        ("proxy.settings", "from proxy.policy import service", True),
        ("proxy.mock.app", "from proxy.settings import Settings", True),
        ("proxy.console.feed", "from proxy.policy.api import AdminAccess", False),
        ("proxy.server.app", "from proxy.review.service import ReviewService", False),
        ("proxy.cli", "from proxy.server.app import create_app", False),
    ],
)
def test_the_layer_check_sees_an_import_across_the_lines(module: str, source: str, bad: bool) -> None:
    assert bool(list(layer_violations(ast.parse(source), module))) is bad


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


def refused_any(source: str, module: str = "proxy.core.x") -> bool:
    return any(refused(name, module) for name, _ in all_imports(ast.parse(source), module))


@pytest.mark.parametrize(
    "bad",
    [
        "import socket",
        "from proxy.settings import Settings",
        "import logging",
        "import importlib; importlib.import_module('asyncio')",
        "__import__('asyncio')",
        "from urllib.request import urlopen",
        "from urllib import request",
        "import os",
        "import time",
        "from pathlib import Path",  # (in a module that is not a start-up loader)
        "import sys",
        "from io import open",
        "import secrets",
    ],
)
def test_the_purity_check_sees_an_import_anywhere_in_a_module(bad: str) -> None:
    source = f"def lazy() -> None:\n    {bad}\n"
    assert refused_any(source)


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        ("proxy.core.config.providers", "from pathlib import Path", False),
        ("proxy.core.config.providers", "from pathlib import Path", False),  # (moved, same loader)
        ("proxy.core.config.routing", "from dotenv import dotenv_values", False),
        ("proxy.core.plan.request", "from dotenv import dotenv_values", True),
        ("proxy.core.seal", "import secrets", False),
        ("proxy.core.plan.request", "from urllib.parse import quote", False),
        ("proxy.core.stream.sse", "from typing import Any", False),
    ],
)
def test_start_up_only_names_are_for_their_modules(module: str, source: str, bad: bool) -> None:
    assert refused_any(source, module) is bad


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("proxy.core", "from .. import settings"),  # the package itself: `..` is proxy
        ("proxy.core.stream", "from ...server import relay"),
        ("proxy.core.errors", "from .. import settings"),
        ("proxy.core.stream.sse", "from ...server.relay import Relay"),
    ],
)
def test_relative_imports_resolve_in_packages_and_modules(module: str, source: str) -> None:
    assert refused_any(source, module)
