"""The commands in README.md and docs/*.md work when copied.

A fenced block whose info string carries the word `runnable` after its language is run here, page
by page, in order (README.md, "Checking the docs", says how to mark one):

- ```` ```sh runnable ```` (or `bash`): run by bash with `-euo pipefail`; it must exit 0.
- ```` ```console runnable ````: each `$ ` line is a command; the lines after it, its expected output
  (stdout and stderr together). `…` in a line stands for any text; a line that is only `…`, for any
  number of lines.
- ```` ```python runnable ````: run by this Python; it must exit 0.
- `server` too: the block keeps running in the background while the page's later blocks run (the
  test waits for `/healthz` on the page's port 8080 first) and is stopped at the page's next
  `server` block (which takes its place) or at the end of the page.
- `file=NAME` (any language): not run; written to NAME for the page's later blocks.

Each page runs in a fresh directory holding a copy of providers.yaml, with no THINKPROXY_*/OTEL_*
variable from outside, `localhost` as 127.0.0.1 and ports 8080 and 8090 replaced by free loopback
ports. `pip install` is not run (this is the installed package, offline): it must install from the
clone (`.`), with extras pyproject.toml declares. Every command is bounded in time.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_TIMEOUT = 120.0  # seconds, any one block or command
SERVER_READY_TIMEOUT = 30.0
SERVER_STOP_TIMEOUT = 15.0
SHELLS = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)$")
ELLIPSIS = "…"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    flags: frozenset[str]
    options: dict[str, str]
    text: str

    @property
    def runnable(self) -> bool:
        return "runnable" in self.flags

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    """Every fenced block of a Markdown page, indented ones (in list items) included."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        words = opening["info"].split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^ *{re.escape(fence)}\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        options = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        flags = frozenset(w for w in words[1:] if "=" not in w)
        language = words[0] if words else ""
        blocks.append(Block(page, i + 1, language, flags, options, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in fenced_blocks(page)]


def runnable_pages() -> list[Path]:
    return [page for page in PAGES if any(b.runnable for b in fenced_blocks(page))]


# --- pip: checked, not run -------------------------------------------------------------------

EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
PIP_TARGET = re.compile(r"^\.(?:\[(?P<extras>[a-z0-9_,-]+)\])?$")


def pip_install_problem(args: list[str]) -> str | None:
    """Why `pip install ARGS`, typed in a clone of this repository, would not install thinkproxy
    from it; None when it would."""
    if not args or args[0] != "install":
        return f"only `pip install` is expected in the docs, not `pip {' '.join(args)}`"
    targets = [a for a in args[1:] if not a.startswith("-")]
    if not targets:
        return "pip install names nothing to install"
    for target in targets:
        match = PIP_TARGET.match(target)
        if match is None:
            return f"{target!r} is not this clone (`.` or '.[extra]'): from a clone, install the clone"
        unknown = set(filter(None, (match["extras"] or "").split(","))) - EXTRAS
        if unknown:
            return f"{target!r}: pyproject.toml declares no extra {sorted(unknown)} (it has {sorted(EXTRAS)})"
    return None


PIP_CHECK = """\
import shlex, sys
sys.path.insert(0, {root!r})
from tests.test_docs_commands import pip_install_problem
problem = pip_install_problem(sys.argv[1:])
said = problem or "installs the clone; not run"
print(f"(docs test) pip {{shlex.join(sys.argv[1:])}}: {{said}}", file=sys.stderr)
sys.exit(1 if problem else 0)
"""


# --- running a page ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Session:
    """One page's working directory, environment and ports."""

    directory: Path
    ports: dict[str, int]
    env: dict[str, str] = field(default_factory=dict)

    def localize(self, text: str) -> str:
        text = re.sub(r"\blocalhost(?=[:/])", "127.0.0.1", text)
        for doc_port, port in self.ports.items():
            text = re.sub(rf"(?<![\d.]){doc_port}(?!\d)", str(port), text)
        return text

    def script(self, commands: str) -> str:
        prelude = f'pip() {{ "{sys.executable}" "{self.directory / ".pip_check.py"}" "$@"; }}\n'
        return prelude + self.localize(commands)

    def run(self, commands: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.script(commands)],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )

    def healthy(self) -> bool:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with direct.open(f"http://127.0.0.1:{self.ports['8080']}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False


def make_session(directory: Path) -> Session:
    shutil.copy(ROOT / "providers.yaml", directory / "providers.yaml")
    (directory / ".pip_check.py").write_text(PIP_CHECK.format(root=str(ROOT)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THINKPROXY_", "OTEL_", "PROMETHEUS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(directory)
    env["NO_COLOR"] = "1"
    # curl, httpx and urllib take HTTP(S)_PROXY from the environment: loopback goes direct
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONUNBUFFERED"] = "1"
    return Session(directory, {"8080": free_port(), "8090": free_port()}, env)


@contextmanager
def server(session: Session, block: Block) -> Iterator[None]:
    log = (session.directory / f"server-{block.line}.log").open("w")
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", session.script(block.text)],
        cwd=session.directory,
        env=session.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: stopped whole, children included
    )
    try:
        deadline = time.monotonic() + SERVER_READY_TIMEOUT
        while not session.healthy():
            if process.poll() is not None:
                output = (session.directory / f"server-{block.line}.log").read_text()
                pytest.fail(f"{block.where}: the server exited ({process.returncode}):\n{output}")
            if time.monotonic() > deadline:
                pytest.fail(f"{block.where}: no answer on /healthz within {SERVER_READY_TIMEOUT} s")
            time.sleep(0.1)
        yield
        assert process.poll() is None, f"{block.where}: the server stopped before the page ended"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=SERVER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=SERVER_STOP_TIMEOUT)
        log.close()


def console_commands(block: Block) -> list[tuple[str, list[str]]]:
    """A console block's (command, expected output lines) pairs."""
    pairs: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.text.splitlines():
        if continued:  # the command's previous line ended with a backslash
            pairs[-1] = (pairs[-1][0] + "\n" + line, [])
        elif line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"{block.where}: a console block starts with a `$ ` command")
        continued = bool(pairs) and not pairs[-1][1] and line.endswith("\\")
    return pairs


def line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.rstrip().split(ELLIPSIS)) + r"\Z")


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Lines in order; `…` within a line is any text, a line of `…` any number of lines."""
    while expected and not expected[-1].strip():
        expected = expected[:-1]
    actual = [line.rstrip() for line in actual]
    while actual and not actual[-1]:
        actual = actual[:-1]

    def match(e: int, a: int) -> bool:
        if e == len(expected):
            return a == len(actual)
        if expected[e].strip() == ELLIPSIS:
            return any(match(e + 1, k) for k in range(a, len(actual) + 1))
        return a < len(actual) and bool(line_pattern(expected[e]).match(actual[a])) and match(e + 1, a + 1)

    return match(0, 0)


def run_block(session: Session, block: Block) -> None:
    if block.language in {"sh", "bash", "shell"}:
        result = session.run(block.text)
        assert result.returncode == 0, (
            f"{block.where} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    elif block.language == "console":
        for command, expected in console_commands(block):
            result = session.run(f"{{\n{command}\n}} 2>&1")
            actual = result.stdout.splitlines()
            assert output_matches(expected, actual), (
                f"{block.where}: `{command}` printed\n{result.stdout}\nexpected\n" + "\n".join(expected)
            )
    elif block.language == "python":
        path = session.directory / f"block-{block.line}.py"
        path.write_text(session.localize(block.text))
        result = subprocess.run(
            [sys.executable, str(path)],
            cwd=session.directory,
            env=session.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, f"{block.where} exited {result.returncode}:\n{result.stderr}"
    else:
        raise AssertionError(f"{block.where}: cannot run a {block.language!r} block")


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_runnable_blocks_run(page: Path, tmp_path: Path) -> None:
    session = make_session(tmp_path)
    with ExitStack() as running:
        for block in fenced_blocks(page):
            if not block.runnable:
                continue
            if "file" in block.options:
                (tmp_path / block.options["file"]).write_text(block.text)
            elif "server" in block.flags:
                running.close()  # the page's previous server, if any, gives way (one port 8080)
                running.enter_context(server(session, block))
            else:
                run_block(session, block)


# --- what the runnable blocks cover, and rules for every block ---------------------------------


def test_the_pages_have_runnable_blocks_of_each_kind() -> None:
    blocks = [b for b in all_blocks() if b.runnable]
    pages = {b.page.name for b in blocks}
    assert {"README.md", "replay.md", "review.md", "routing.md", "providers.md"} <= pages
    assert {b.language for b in blocks} >= {"sh", "console", "python"}
    assert any("server" in b.flags for b in blocks) and any("file" in b.options for b in blocks)
    for block in blocks:
        assert block.language in SHELLS | {"python"} or "file" in block.options, block.where
        if "server" in block.flags:
            assert "0.0.0.0" not in block.text, f"{block.where}: servers in tests bind loopback only"


def test_every_offline_thinkproxy_command_is_runnable() -> None:
    """`thinkproxy explain`, `check`, `demo`, the simulated upstream and `serve --mock` need no
    network: a block that shows one is run."""
    offline = re.compile(
        r"^\$? ?(?:\S+=\S+ )*thinkproxy (?:explain|check|demo|mock-upstream|serve\b.*--mock)\b", re.M
    )
    unmarked = [
        b.where for b in all_blocks() if b.language in SHELLS and offline.search(b.text) and not b.runnable
    ]
    assert unmarked == []


def shell_commands(text: str) -> list[str]:
    """The commands of a shell or console block, continuation lines joined, prompts removed."""
    text = re.sub(r"\\\n\s*", " ", text)
    return [line[2:] if line.startswith("$ ") else line for line in text.splitlines()]


INLINE_CODE = re.compile(r"`([^`]+)`")


def test_pip_commands_install_from_the_clone() -> None:
    found: list[tuple[str, str]] = []
    for page in PAGES:
        # Inline code only outside fenced blocks (their commands are read below): a fence's
        # backticks would pair up with an inline span's and hide it.
        text = re.sub(r"^```.*?^```[^\n]*$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for span in INLINE_CODE.findall(text):
            if re.match(r"pip\s+install\b", span):
                found.append((page.name, " ".join(span.split())))
    for block in all_blocks():
        if block.language in SHELLS:
            for command in shell_commands(block.text):
                for part in re.split(r"&&|;|\|\|", command):
                    if re.match(r"\s*pip\s+install\b", part):
                        found.append((block.where, part.strip()))
    assert len(found) >= 4
    said = [(where, cmd, pip_install_problem(shlex.split(cmd, comments=True)[1:])) for where, cmd in found]
    problems = [s for s in said if s[2]]
    assert problems == []


def test_the_pip_check_refuses_what_fails_from_a_clone() -> None:
    assert pip_install_problem(["install", "."]) is None
    assert pip_install_problem(["install", "-e", ".[test]"]) is None
    assert pip_install_problem(["install", ".[otel]"]) is None
    assert "not this clone" in (pip_install_problem(["install", "thinkproxy[otel]"]) or "")
    assert "no extra" in (pip_install_problem(["install", ".[otle]"]) or "")


def test_curl_commands_that_send_json_say_so() -> None:
    sending = []
    for block in all_blocks():
        if block.language not in SHELLS:
            continue
        for command in shell_commands(block.text):
            if re.match(r"\s*curl\b", command) and re.search(r"\s(?:-d|--data(?:-raw|-binary)?)\b", command):
                sending.append((block.where, command))
    assert len(sending) >= 4
    missing = [(w, c) for w, c in sending if not re.search(r"content-type: application/json", c, re.I)]
    assert missing == []


def test_the_readme_has_two_set_up_commands_and_warns_of_the_silent_compile_first() -> None:
    """`pip install .` compiles with mypyc for about two minutes, silently: a new user told nothing
    takes it for a hang. The README says so before the command, and keeps to its two set-ups."""
    readme = ROOT / "README.md"
    fenced = [
        (block, command)
        for block in fenced_blocks(readme)
        if block.language in SHELLS
        for command in shell_commands(block.text)
        if re.search(r"\bpip\s+install\b", command)
    ]
    assert [command for _, command in fenced] == [
        "pip install . && thinkproxy demo",
        "pip install -e '.[test]' && pytest",
    ]
    before = readme.read_text(encoding="utf-8").splitlines()[: fenced[0][0].line - 1]
    said = " ".join(before[max(i for i, line in enumerate(before) if line.startswith("## ")) :])
    assert re.search(r"mypyc", said) and re.search(r"silen(?:t|ce)", said), said
    assert re.search(r"\btwo minutes\b", said), said


def test_a_checked_providers_file_is_said_to_be_read_where_you_are() -> None:
    """`thinkproxy check providers.yaml` works from the clone's root only, and `check` alone reads
    the installed table, not the clone's (a copy made by `pip install .`): the prose after every
    block that runs it says both."""
    shown = [
        b
        for b in all_blocks()
        if b.language in SHELLS and re.search(r"thinkproxy check providers\.yaml", b.text)
    ]
    assert {b.page.name for b in shown} >= {"README.md", "providers.md"}
    for block in shown:
        assert "clone's root" in prose_after(block) and "installed" in prose_after(block), block.where


def prose_after(block: Block) -> str:
    """The text from the end of a fenced block to the next heading, lines joined."""
    lines = block.page.read_text(encoding="utf-8").splitlines()[block.line :]
    closing = next(i for i, line in enumerate(lines) if line.strip().startswith("```"))
    after = lines[closing + 1 :]
    end = next((i for i, line in enumerate(after) if line.startswith("#")), len(after))
    return " ".join(" ".join(after[:end]).split())


RETIRED = re.compile(r"\bdeepseek-(?:chat|reasoner)\b")


def test_no_retired_model_in_examples() -> None:
    """providers.yaml: DeepSeek retired the deepseek-chat / deepseek-reasoner aliases on 2026-07-24."""
    assert "retired on 2026-07-24" in (ROOT / "providers.yaml").read_text(encoding="utf-8")
    ui = sorted((ROOT / "proxy" / "console" / "ui").rglob("*.*"))
    texts = [*PAGES, *ui]
    offenders = [str(p.relative_to(ROOT)) for p in texts if RETIRED.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


# --- the matcher itself --------------------------------------------------------------------------


def test_output_matching_is_strict_except_for_ellipses() -> None:
    assert output_matches(["a: OK (…)", "…", "z"], ["a: OK (3 things)", "b", "c", "z"])
    assert output_matches(["…"], [])
    assert not output_matches(["a"], ["a", "b"])
    assert not output_matches(["a: OK (…)"], ["a: FAILED (3)"])
    assert not output_matches(["x", "…"], ["y"])
