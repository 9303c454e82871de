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

# One rule: what runs per chunk. Every module of the per-chunk core (proxy/core/stream) and of the
# front doors' and upstream protocols' adapters (proxy/core/protocols), pure and run per chunk:
# compiled, the proxy's own work takes ~28% fewer instructions, and a real server 3.8% less CPU per
# non-stream request and 9.6% less per burst stream (bench/README.md, items 15 and 16). Packages are
# taken whole, subpackages included (the Responses and Messages doors' own folders);
# `proxy.core.jsonio`, the JSON helpers of every per-chunk reader and writer, is one module of the
# core's root that the stream and the protocols call per chunk.
# What every request runs once (the request plan, the policy's readings of a body, the replay
# store's keys and records, the token accounting, the control headers, the upstream's URL and
# headers) stays interpreted: compiled, it took 6.1% fewer instructions from a served non-stream
# request but no time a paired run could see, on two machines: on an AMD EPYC, those modules
# interpreted against compiled, two runs, +0.2% and −1.4% per JSON request, −0.6% and +0.8% per burst
# stream; on the machine of the 2026-12-02 pass, a similar set compiled against interpreted, +1.8%
# and −1.4% (bench/README.md, "The same pairs on another CPU").
COMPILED_PACKAGES = ("proxy.core.stream", "proxy.core.protocols")
COMPILED_MODULES = ("proxy.core.jsonio",)


def _package_modules(package: str) -> tuple[str, ...]:
    # Read from the sources, which a compiled wheel keeps beside its extensions.
    folder = Path(__file__).resolve().parent.joinpath(*package.split(".")[1:])
    return tuple(
        sorted(
            ".".join((package, *path.relative_to(folder).with_suffix("").parts))
            for path in folder.rglob("*.py")
            if path.stem != "__init__"
        )
    )


COMPILED_CORE = COMPILED_MODULES + tuple(
    name for package in COMPILED_PACKAGES for name in _package_modules(package)
)


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
