"""Which build the suite runs on. CI runs the suite twice, on the pure build and on the compiled
one, and says which it expects in THINKPROXY_EXPECT_BUILD: a compiled run that silently imported
the sources (or the reverse) would test the wrong thing and still pass."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from proxy import build_info
from proxy.build_info import COMPILED_CORE, build_label, compiled_modules, is_compiled
from proxy.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_the_build_is_the_one_ci_expects() -> None:
    expected = os.environ.get("THINKPROXY_EXPECT_BUILD")
    if expected is None:
        pytest.skip("THINKPROXY_EXPECT_BUILD not set (CI sets it: pure or compiled)")
    assert expected in {"pure", "compiled"}, f"THINKPROXY_EXPECT_BUILD={expected!r}: pure or compiled"
    assert compiled_modules() == (list(COMPILED_CORE) if expected == "compiled" else [])


def test_every_core_module_exists_and_is_named_once() -> None:
    assert len(set(COMPILED_CORE)) == len(COMPILED_CORE)
    for name in COMPILED_CORE:
        assert importlib.util.find_spec(name) is not None, name


def test_a_module_loaded_from_source_is_not_compiled() -> None:
    assert not is_compiled("proxy.build_info")  # never compiled: it reads the others
    assert build_info.__file__ is not None and build_info.__file__.endswith(".py")


def test_the_label_says_which_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_info, "compiled_modules", lambda: [])
    assert build_label() == "pure Python"
    monkeypatch.setattr(build_info, "compiled_modules", lambda: list(COMPILED_CORE))
    assert build_label() == "mypyc-compiled core"
    monkeypatch.setattr(build_info, "compiled_modules", lambda: ["proxy.core.stream.sse"])
    assert build_label() == "partly compiled: proxy.core.stream.sse"


def test_version_names_the_build(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert f"({build_label()})" in capsys.readouterr().out


def test_the_build_hook_compiles_the_list_build_info_names() -> None:
    # hatch_build.py reads COMPILED_CORE from the file, without importing the package.
    _hook()
    assert sys.modules["hatch_build"]._core_modules(ROOT) == COMPILED_CORE


def _hook(root: Path = ROOT) -> Any:
    sys.path.insert(0, str(ROOT))
    try:
        hatch_build = pytest.importorskip("hatch_build", reason="hatchling is not installed here")
    finally:
        sys.path.remove(str(ROOT))
    # BuildHookInterface(root, config, build_config, metadata, directory, target_name, app)
    return hatch_build.CompileCoreHook(str(root), {}, None, None, "", "wheel", None)


def _empty_build_data() -> dict[str, Any]:
    return {"pure_python": True, "infer_tag": False, "force_include": {}}


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_without_a_toolchain_the_wheel_is_pure(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    hook = _hook()
    monkeypatch.setattr(sys.modules["hatch_build"], "_missing_toolchain", lambda: "no C compiler")
    monkeypatch.setenv("THINKPROXY_COMPILE", mode)
    data = _empty_build_data()
    hook.initialize("standard", data)
    assert data == _empty_build_data()


def test_require_fails_the_build_without_a_toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook()
    monkeypatch.setattr(sys.modules["hatch_build"], "_missing_toolchain", lambda: "no C compiler")
    monkeypatch.setenv("THINKPROXY_COMPILE", "require")
    with pytest.raises(RuntimeError, match="no C compiler"):
        hook.initialize("standard", _empty_build_data())


def test_an_editable_install_stays_pure_whatever_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _hook()
    monkeypatch.setattr(sys.modules["hatch_build"], "_compile", lambda *a: pytest.fail("compiled"))
    monkeypatch.setenv("THINKPROXY_COMPILE", "require")
    data = _empty_build_data()
    hook.initialize("editable", data)
    assert data == _empty_build_data()


def test_an_unknown_mode_is_refused_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINKPROXY_COMPILE", "yes")
    with pytest.raises(ValueError, match="auto, require, off"):
        _hook().initialize("standard", _empty_build_data())


def test_a_failed_compile_falls_back_unless_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(root: Path, build: Path) -> dict[Path, str]:
        (build / "half-built").write_text("")
        raise RuntimeError("mypyc exited 1")

    hook = _hook()
    module = sys.modules["hatch_build"]
    monkeypatch.setattr(module.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "build"))
    (tmp_path / "build").mkdir()
    monkeypatch.setattr(module, "_missing_toolchain", lambda: None)
    monkeypatch.setattr(module, "_compile", broken)
    monkeypatch.setenv("THINKPROXY_COMPILE", "auto")
    data = _empty_build_data()
    hook.initialize("standard", data)
    hook.finalize("standard", data, "")
    assert data == _empty_build_data()
    assert not (tmp_path / "build").exists()
    (tmp_path / "build").mkdir()
    monkeypatch.setenv("THINKPROXY_COMPILE", "require")
    with pytest.raises(RuntimeError, match="mypyc exited 1"):
        hook.initialize("standard", _empty_build_data())
    assert not (tmp_path / "build").exists()  # finalize never runs after a failed build


def test_the_toolchain_check_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _hook()
    module = sys.modules["hatch_build"]
    if module._missing_toolchain() is not None:
        pytest.skip(f"this machine cannot compile: {module._missing_toolchain()}")
    monkeypatch.setenv("CC", "ccache no-such-cc -O2")  # setuptools calls $CC when it is set
    assert "'no-such-cc' not found" in module._missing_toolchain()
    monkeypatch.delenv("CC")
    monkeypatch.setattr(module.shutil, "which", lambda name: None)
    assert "no C compiler" in module._missing_toolchain()
    monkeypatch.setattr(module.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    assert "no Python headers" in module._missing_toolchain()
    monkeypatch.setattr(module.sys, "implementation", SimpleNamespace(name="pypy"))
    assert "CPython only" in module._missing_toolchain()


def test_the_compile_requirements_are_asked_for_only_where_it_can_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # mypy needs compiled dependencies without wheels on some platforms: a build that will not
    # compile must not fail to install them first.
    hook = _hook()
    module = sys.modules["hatch_build"]
    monkeypatch.setattr(module, "_missing_toolchain", lambda check_mypyc=True: None)
    monkeypatch.setenv("THINKPROXY_COMPILE", "auto")
    assert hook.dependencies() == module.COMPILE_REQUIRES
    assert any(requirement.startswith("mypy==") for requirement in hook.dependencies())
    monkeypatch.setenv("THINKPROXY_COMPILE", "off")
    assert hook.dependencies() == []
    monkeypatch.setenv("THINKPROXY_COMPILE", "require")
    monkeypatch.setattr(module, "_missing_toolchain", lambda check_mypyc=True: "no C compiler")
    assert hook.dependencies() == []  # (initialize then fails, saying why)


def _imports_of(module: str) -> list[str]:
    base = ROOT / module.replace(".", "/")
    path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
    if not path.exists():
        return []
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def test_the_build_environment_has_every_library_the_compiled_core_reaches() -> None:
    """mypyc type-checks everything a compiled module imports, through the whole proxy package: a
    third-party library it reaches must be among the compile requirements, or the wheel fails to
    build wherever no venv happens to provide it (the Dockerfile's build stage did, for dotenv)."""
    _hook()
    requires = {
        re.split(r"[<>=\[ ]", requirement, maxsplit=1)[0].lower()
        for requirement in sys.modules["hatch_build"].COMPILE_REQUIRES
    }
    distributions = importlib.metadata.packages_distributions()
    seen, queue, libraries = set(COMPILED_CORE), list(COMPILED_CORE), set()
    while queue:
        for name in _imports_of(queue.pop()):
            top = name.split(".")[0]
            if top == "proxy":
                if name not in seen:
                    seen.add(name)
                    queue.append(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                libraries.add(top)
    assert libraries, "the walk found no library at all: it is not reading the modules"
    missing = {lib for lib in libraries if not {d.lower() for d in distributions.get(lib, [lib])} & requires}
    assert not missing, f"compiled core reaches {sorted(missing)}: add them to hatch_build.COMPILE_REQUIRES"
