"""Which build of the core this installation runs: compiled by mypyc, or pure Python.

The wheel's build hook (`hatch_build.py`) compiles `COMPILED_CORE` when it can and falls back to
pure Python when it cannot (no C compiler, no Python headers); editable installs stay pure so
that an edit takes effect. CI runs the test suite on both builds. This module holds the list the
hook compiles and tells which modules actually loaded compiled, for `--version` and the start-up
line, so an operator can see what they run.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

# One rule: every module of the per-chunk core (proxy/core/stream) and of the front doors' and
# upstream protocols' adapters (proxy/core/protocols), pure and run per chunk. Compiled, the proxy's
# own work takes ~28% fewer instructions, and a real server 3.8% less CPU per non-stream request
# and 9.6% less per burst stream (bench/README.md, items 15 and 16).
COMPILED_PACKAGES = ("proxy.core.stream", "proxy.core.protocols")


def _package_modules(package: str) -> tuple[str, ...]:
    # Read from the sources, which a compiled wheel keeps beside its extensions.
    folder = Path(__file__).resolve().parent.joinpath(*package.split(".")[1:])
    return tuple(sorted(f"{package}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"))


COMPILED_CORE = tuple(name for package in COMPILED_PACKAGES for name in _package_modules(package))


def is_compiled(module: str) -> bool:
    """True when `module` was loaded from a compiled extension rather than its source."""
    path = getattr(importlib.import_module(module), "__file__", None) or ""
    return path.endswith(tuple(EXTENSION_SUFFIXES))


def compiled_modules() -> list[str]:
    return [name for name in COMPILED_CORE if is_compiled(name)]


def build_label() -> str:
    """`mypyc-compiled core`, `pure Python`, or which modules are compiled when only some are."""
    compiled = compiled_modules()
    if not compiled:
        return "pure Python"
    if len(compiled) == len(COMPILED_CORE):
        return "mypyc-compiled core"
    return "partly compiled: " + ", ".join(compiled)
