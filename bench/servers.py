"""Start the bench's servers: the fake upstream and the targets (baselines, thinkproxy).

Baselines run under uvicorn with uvloop + httptools and no access log. thinkproxy runs through its
own `thinkproxy serve`, configured only by THINKPROXY_* variables, with the defaults a user gets
(access log on, written to its log file) unless a variant turns something off. Each gets a free
port on 127.0.0.1 and is pinned to `core` with taskset when given.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from common import BENCH_DIR, Processes, free_port, pin_argv, python, wait_listening

# thinkproxy as users run it (`thinkproxy`: every default — access log, brief trace, metrics,
# replay store) and variants, each turning one thing off, to show what that thing costs.
THINKPROXY_VARIANTS: dict[str, dict[str, str]] = {
    "thinkproxy": {},
    "thinkproxy-nolog": {"THINKPROXY_LOG_LEVEL": "warning"},
    "thinkproxy-nometrics": {"THINKPROXY_METRICS": "false"},
    "thinkproxy-nostate": {"THINKPROXY_STATE": "off"},
    "thinkproxy-notrace": {"THINKPROXY_TRACE": "off"},
    "thinkproxy-quiet": {
        "THINKPROXY_LOG_LEVEL": "warning",
        "THINKPROXY_METRICS": "false",
        "THINKPROXY_STATE": "off",
        "THINKPROXY_TRACE": "off",
    },
    "thinkproxy-httpx": {"THINKPROXY_HTTP_TRANSPORT": "httpx"},
}
TARGET_NAMES = ["baseline-aiohttp", "baseline-aiohttp-chunked", "baseline-httpx", *THINKPROXY_VARIANTS]


def thinkproxy_command() -> list[str] | None:
    """`[.../thinkproxy, "serve"]` when the CLI works, else None (and says why)."""
    bindir = Path(python()).parent
    exe = bindir / "thinkproxy"
    if not exe.exists():
        print(f"  thinkproxy: {exe} missing — install with `{bindir}/pip install -e {BENCH_DIR.parent}`")
        return None
    probe = subprocess.run(
        [str(exe), "serve", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        print(f"  thinkproxy: `thinkproxy serve --help` failed (exit {probe.returncode}); skipping it")
        print("    " + (probe.stderr or probe.stdout).strip()[-800:].replace("\n", "\n    "))
        return None
    return [str(exe), "serve"]


def clean_env() -> dict[str, str]:
    """The environment minus any THINKPROXY_* / BENCH_* the caller had set: runs are reproducible.

    PYTHONFAULTHANDLER: a server that crashes in C code (segfault) leaves a Python traceback
    in its log instead of nothing.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THINKPROXY_", "BENCH_"))}
    env["PYTHONFAULTHANDLER"] = "1"
    return env


def start_upstream(procs: Processes, core: int | None, slow_interval_ms: float = 150.0) -> int:
    port = free_port()
    argv = [python(), str(BENCH_DIR / "fake_upstream.py"), "--port", str(port)]
    argv += ["--slow-interval-ms", str(slow_interval_ms)]
    wait_listening(port, procs.start("fake-upstream", pin_argv(core, argv)))
    return port


# `--before DIR` (run.py): the defaults of another checkout, measured side by side with this one.
BEFORE = "thinkproxy-before"
before_tree: Path | None = None
# `--tree DIR` (run.py): the checkout the other thinkproxy targets run (default: the venv's install).
tree: Path | None = None


def build_of(name: str, variants: dict[str, dict[str, str]] | None = None) -> str | None:
    """Which build a thinkproxy target runs (proxy.build_info: `mypyc-compiled core` or `pure
    Python`), asked of the same Python with the environment `target_argv` starts it with; None for
    the baselines. An editable install is pure: to measure the compiled build, use a tree made by
    `bench/compiled_tree.py` (`--tree`/`--before` in run.py, `PYTHONPATH=` in cost_pairs.py)."""
    if name.startswith("baseline-"):
        return None
    spec = target_argv(name, 0, 0, None, ["thinkproxy", "serve"], variants)  # only its env is used
    return None if spec is None else probe_build(spec[1])


def probe_build(env: dict[str, str]) -> str:
    workdir = BENCH_DIR / "results" / "cwd"  # as the targets: nothing on the path from the cwd
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        probe = subprocess.run(
            [python(), "-c", "from proxy.build_info import build_label; print(build_label())"],
            env=env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "unknown (the probe timed out)"
    if probe.returncode == 0:
        return probe.stdout.strip()
    if "No module named 'proxy.build_info'" in probe.stderr:
        return "pure Python (older code: no proxy.build_info)"
    return "unknown (" + (probe.stderr.strip().splitlines() or ["the probe failed"])[-1] + ")"


def target_argv(
    name: str,
    port: int,
    upstream_port: int,
    level: str | None,
    proxy_cmd: list[str] | None,
    variants: dict[str, dict[str, str]] | None = None,
) -> tuple[list[str], dict[str, str]] | None:
    variants = THINKPROXY_VARIANTS if variants is None else variants
    env = clean_env()
    if name.startswith("baseline-"):
        env["BENCH_UPSTREAM"] = f"http://127.0.0.1:{upstream_port}"
        argv = [python(), "-m", "uvicorn", "--app-dir", str(BENCH_DIR), name.replace("-", "_") + ":app"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop", "--http", "httptools"]
        argv += ["--no-access-log", "--log-level", "warning"]
        return argv, env
    if name == BEFORE and before_tree is not None:
        # Another checkout's code (an earlier commit, say), run with every default, from the same
        # venv: `python -m proxy.cli serve` with that tree first on the path.
        env.update(
            PYTHONPATH=str(before_tree),
            THINKPROXY_UPSTREAM_BASE_URL=f"http://127.0.0.1:{upstream_port}/v1",
            THINKPROXY_HOST="127.0.0.1",
            THINKPROXY_PORT=str(port),
        )
        if level is not None:
            env["THINKPROXY_DEFAULT_THINKING_LEVEL"] = level
        return [python(), "-m", "proxy.cli", "serve"], env
    if name in variants and proxy_cmd is not None:
        env.update(
            THINKPROXY_UPSTREAM_BASE_URL=f"http://127.0.0.1:{upstream_port}/v1",
            THINKPROXY_HOST="127.0.0.1",
            THINKPROXY_PORT=str(port),
        )
        env.update(variants[name])
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        if level is not None:
            env["THINKPROXY_DEFAULT_THINKING_LEVEL"] = level
        return list(proxy_cmd), env
    return None


def start_targets(
    procs: Processes,
    names: list[str],
    upstream_port: int,
    core: int | None,
    level: str | None,
    variants: dict[str, dict[str, str]] | None = None,
) -> dict[str, tuple[int, int]]:
    """Start the named targets side by side; {name: (port, pid)} of those that came up.

    `variants`: thinkproxy builds by name (THINKPROXY_* settings on top of the defaults), instead
    of THINKPROXY_VARIANTS."""
    variants = THINKPROXY_VARIANTS if variants is None else variants
    proxy_cmd = thinkproxy_command() if any(n in variants for n in names) else None
    workdir = BENCH_DIR / "results" / "cwd"  # an empty working directory: no stray .env gets picked up
    workdir.mkdir(parents=True, exist_ok=True)
    started: list[tuple[str, int, subprocess.Popen[bytes]]] = []
    for name in names:
        port = free_port()
        spec = target_argv(name, port, upstream_port, level, proxy_cmd, variants)
        if spec is not None:
            argv, env = spec
            started.append((name, port, procs.start(name, pin_argv(core, argv), env=env, cwd=workdir)))
    up: dict[str, tuple[int, int]] = {}
    for name, port, proc in started:
        try:
            wait_listening(port, proc)
        except RuntimeError as exc:
            print(f"  {name}: did not start ({exc})\n    " + procs.log_tail(name).replace("\n", "\n    "))
            continue
        up[name] = (port, proc.pid)
    return up
