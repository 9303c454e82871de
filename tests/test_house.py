"""The house: the README's layout (the map a newcomer reads first) names every module of the core,
the stream core and the server edge, and nothing that is not there; no module passes 500 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LAYOUT = README[README.index("## Layout") : README.index("Tests mirror the packages")]


def bullet(folder: str) -> set[str]:
    text = LAYOUT[LAYOUT.index(f"- `{folder}/`") :]
    text = text[: text.index("\n- ")] if "\n- " in text else text
    return {name.rstrip("/") for name in re.findall(r"`([a-z_]+/?)`", text)}


def modules(folder: str) -> set[str]:
    path = ROOT / folder
    found = {p.stem for p in path.glob("*.py") if p.stem != "__init__"}
    return found | {p.name for p in path.iterdir() if (p / "__init__.py").exists()}


def test_the_layout_names_every_module_and_only_real_ones() -> None:
    upstream = modules("proxy/server/upstream")  # (named inside the server's bullet)
    for folder in ("proxy/core", "proxy/core/stream", "proxy/server"):
        named, real = bullet(folder), modules(folder)
        if folder == "proxy/core":
            real.discard("stream")  # (its own bullet)
        if folder == "proxy/server":
            assert named >= upstream, ("proxy/server/upstream", "missing:", upstream - named)
            named -= upstream
        assert named == real, (folder, "missing:", real - named, "not there:", named - real)


def test_no_module_is_over_500_lines() -> None:
    """Small modules that say what they are (the simulated upstream aside: it is test equipment)."""
    long = {
        str(path.relative_to(ROOT)): n
        for path in (ROOT / "proxy").rglob("*.py")
        if "mock" not in path.parts and (n := len(path.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}
