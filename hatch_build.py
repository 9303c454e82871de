"""Wheel build hook: compile the pure core with mypyc when this machine can, else ship pure Python.

`THINKPROXY_COMPILE` chooses:
  auto     (default) compile when a C compiler and the Python headers are present; otherwise
           build the same wheel in pure Python and say why on stderr (`pip install -v` shows it);
  require  compile or fail the build (the container image and CI's compiled run use this);
  off      pure Python.
Editable installs (`pip install -e .`) always stay pure, so that an edit to a source file takes
effect without a rebuild. The modules compiled are `proxy.build_info.COMPILED_CORE`; the wheel
keeps their sources too (Python imports the compiled extension first), and `thinkproxy --version`
tells which build is installed.

Why compile: the proxy's own work takes ~28% fewer instructions, and a real server 3.8% less CPU
per non-stream request and 9.6% less per burst stream (bench/README.md, items 15 and 16).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODES = ("auto", "require", "off")
# The shared library's name (default: a hash of the module names): one group for the whole core.
GROUP = "thinkproxy_core"
# What compiling needs in the build environment. mypy is pinned: the C it generates is what both
# builds of the suite were run against. Asked for only when this machine can compile (see
# `dependencies`): mypy needs compiled dependencies of its own that have no wheel on some
# platforms, and a build that will not compile must not fail for want of them.
# The protocols' adapters import pydantic (providers' models), cryptography (the sealed blobs),
# PyYAML and (through the request plan's routing) python-dotenv: mypyc type-checks what a compiled
# module imports, so they are in the build environment too. A build whose environment lacks one
# fails only where nothing else provides it (the Dockerfile's build stage, not a dev venv).
COMPILE_REQUIRES = [
    "mypy==2.4.1",
    "setuptools>=70",
    "orjson>=3.10",
    "pydantic>=2.7",
    "cryptography>=44",
    "pyyaml>=6.0",
    "types-PyYAML",
    "python-dotenv>=1.0",
]
# Far more than a compile takes (~1 min on one core), so a stuck compiler fails the build instead
# of hanging it.
COMPILE_TIMEOUT_S = 1800


class CompileCoreHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        if _mode() == "off" or _missing_toolchain(check_mypyc=False) is not None:
            return []
        return list(COMPILE_REQUIRES)

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._build_dir: str | None = None
        if self.target_name != "wheel" or version == "editable":
            return
        mode = _mode()
        if mode == "off":
            _say("THINKPROXY_COMPILE=off: building the pure-Python wheel")
            return
        missing = _missing_toolchain()
        if missing:
            if mode == "require":
                raise RuntimeError(f"THINKPROXY_COMPILE=require, but the core cannot be compiled: {missing}")
            _say(f"building the pure-Python wheel ({missing}; THINKPROXY_COMPILE=require makes this fatal)")
            return
        self._build_dir = tempfile.mkdtemp(prefix="thinkproxy-mypyc-")
        try:
            built = _compile(Path(self.root), Path(self._build_dir))
        except Exception as exc:
            shutil.rmtree(self._build_dir, ignore_errors=True)
            self._build_dir = None
            if mode == "require":
                raise
            _say(f"mypyc failed, building the pure-Python wheel instead: {exc}")
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True  # the wheel now fits this interpreter and platform only
        build_data["force_include"].update({str(path): name for path, name in built.items()})
        _say(f"compiled {len(built) - 1} core modules with mypyc")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._build_dir is not None:
            shutil.rmtree(self._build_dir, ignore_errors=True)


def _say(message: str) -> None:
    print(f"thinkproxy build: {message}", file=sys.stderr)


def _mode() -> str:
    mode = os.environ.get("THINKPROXY_COMPILE", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"THINKPROXY_COMPILE={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def _missing_toolchain(check_mypyc: bool = True) -> str | None:
    """Why this machine cannot compile the core, or None when it can."""
    if sys.implementation.name != "cpython":
        return f"mypyc compiles for CPython only, not {sys.implementation.name}"
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        return f"no Python headers ({include}/Python.h; on Debian: apt-get install python3-dev)"
    # The compiler setuptools will call: $CC when set, else the one Python was built with; its
    # first word that is not a wrapper such as ccache.
    words = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "").split()
    compiler = next((word for word in words if word not in {"ccache", "sccache"}), None)
    if compiler is not None and shutil.which(compiler) is None:
        return f"no C compiler ({compiler!r} not found; on Debian: apt-get install gcc)"
    if check_mypyc and importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed in the build environment"
    return None


def _core_modules(root: Path) -> tuple[str, ...]:
    """proxy.build_info.COMPILED_CORE, read without importing the package (it needs its deps)."""
    spec = importlib.util.spec_from_file_location("_thinkproxy_build_info", root / "proxy" / "build_info.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.COMPILED_CORE)


def _compile(root: Path, build: Path) -> dict[Path, str]:
    """Compile the core in a copy of the package under `build`, so nothing lands in the source
    tree; returns each built extension and its path inside the wheel."""
    shutil.copytree(root / "proxy", build / "proxy", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    paths = [str(Path(*name.split(".")).with_suffix(".py")) for name in _core_modules(root)]
    setup = build / "setup.py"
    setup.write_text(
        "from setuptools import setup\n"
        "from mypyc.build import mypycify\n"
        f"setup(name={GROUP!r}, ext_modules=mypycify({paths!r}, group_name={GROUP!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, str(setup), "build_ext", "--inplace"],
        cwd=build,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=COMPILE_TIMEOUT_S,
    )
    if result.returncode:
        raise RuntimeError(f"mypyc exited {result.returncode}:\n{result.stdout[-4000:]}")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = {build / f"{GROUP}__mypyc{suffix}": f"{GROUP}__mypyc{suffix}"}
    for path in paths:
        name = str(Path(path).with_suffix("")) + suffix
        built[build / name] = name
    absent = [name for path, name in built.items() if not path.exists()]
    if absent:
        raise RuntimeError(f"mypyc did not build {', '.join(absent)}:\n{result.stdout[-4000:]}")
    return built
