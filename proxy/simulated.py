"""The simulated upstream (proxy.mock) as the proxy sees it: each of its path prefixes speaks one
provider's dialect, so each is mapped onto the providers.yaml entry of that provider.

Used in-process by `thinkproxy demo` and the tests (`simulated_table`), and by `thinkproxy serve
--mock`, whose worker processes load their table from a file (`simulated_providers_text`).
Without this mapping a loopback upstream is the `self-hosted` entry (vLLM's chat-template switch),
which is not what a mock speaking DeepSeek reads.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from types import FrameType
from typing import Any

from proxy.core.config.providers import ProvidersTable, default_providers_path
from proxy.core.config.yamlfile import load_config
from proxy.core.errors import ConfigError

# Path prefixes of the simulated upstream → the providers.yaml entry whose dialect it speaks.
SIMULATED_ROUTES = {
    "deepseek": "deepseek",
    "qwen": "dashscope",
    "kimi": "kimi",
    "minimax": "minimax",
    "minimax-split": "minimax",
    "ollama": "ollama",
    "openrouter": "openrouter",
    "mistral": "mistral",
    "prompted": "openai",
    "openai": "openai",
    # (/vllm is on loopback: the self-hosted entry already; SGLang's field is its own entry's)
    "sglang": "sglang",
}


def simulated_table(mock_port: int, table: ProvidersTable | None = None) -> ProvidersTable:
    """The providers table with the simulated upstream's path prefixes mapped onto the real
    entries, so `http://127.0.0.1:PORT/deepseek/v1` is treated exactly like api.deepseek.com, but
    for the Messages door: an entry's native Messages API is a real host (DeepSeek's /anthropic),
    and the simulated providers serve chat, so their Messages door bridges."""
    table = table or ProvidersTable.load()
    for prefix, entry in SIMULATED_ROUTES.items():
        table = table.with_extra_patterns(entry, [f"127.0.0.1:{mock_port}/{prefix}"])
        table = table.with_messages_bridged(entry)
    return table


def simulated_providers_text(mock_port: int, source: Path | None = None) -> str:
    """`simulated_table` as a providers file, for processes that load their own table (`serve
    --mock`'s workers): the file at `source` (default: the installed one) with the same patterns
    added and the same Messages doors bridged. Written as JSON, a YAML subset that reads back with
    no YAML 1.1 surprise (`off` stays a string)."""
    path = source or default_providers_path()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the providers file: {exc}") from None
    data: Any = load_config(text, str(path))
    providers = data.get("providers") if isinstance(data, dict) else None
    if not isinstance(providers, dict):
        raise ConfigError(f"{path}: no `providers:` mapping to put the simulated upstream in")
    for prefix, name in SIMULATED_ROUTES.items():
        entry = providers.get(name)
        if not isinstance(entry, dict):
            raise ConfigError(
                f"{path}: no entry {name!r}, which the simulated upstream's /{prefix}/v1 imitates"
            )
        entry.setdefault("match", []).append(f"127.0.0.1:{mock_port}/{prefix}")
        for rules in (entry, *(entry.get("models") or ())):
            if isinstance(rules, dict):
                rules.pop("messages", None)  # (bridged: the simulated providers serve chat)
    return json.dumps(data, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class SimulatedServe:
    """What `serve --mock` runs against: the simulated upstream's origin and the providers file
    that maps its prefixes."""

    url: str
    dialect: str
    providers_file: Path

    @property
    def upstream(self) -> str:
        return f"{self.url}/{self.dialect}/v1"

    @property
    def entry(self) -> str:
        return SIMULATED_ROUTES[self.dialect]

    def allow(self, environ: MutableMapping[str, str]) -> None:
        """Let clients pick the other simulated providers with X-Upstream-Base-URL (outside
        gateway mode), beside whatever THINKPROXY_ALLOWED_UPSTREAMS already admits."""
        allowed = environ.get("THINKPROXY_ALLOWED_UPSTREAMS", "").strip()
        origin = self.url.removeprefix("http://")
        environ["THINKPROXY_ALLOWED_UPSTREAMS"] = f"{allowed},{origin}" if allowed else origin

    def banner(self) -> str:
        others = "|".join(p for p in SIMULATED_ROUTES if p != self.dialect)
        return (
            f"simulated upstream on {self.url} (offline): {self.upstream} speaks {self.dialect}, "
            f"entry {self.entry!r}; the other simulated providers by X-Upstream-Base-URL: "
            f"{self.url}/<{others}>/v1; what the proxy sent: GET {self.url}/_mock/requests"
        )


def serve_simulated(args: argparse.Namespace, serve: Callable[[argparse.Namespace], int]) -> int:
    """`thinkproxy serve --mock [PROVIDER] [--mock-port N]`: `serve` (the command's own) in front of
    the simulated upstream run on a thread of this process, each of its path prefixes mapped onto
    the providers.yaml entry it imitates (of `--providers`' table, or the installed one), as `thinkproxy
    demo` does; X-Upstream-Base-URL may pick any of them. Exit status as `serve`'s."""
    problem = None
    if args.mock is None:
        problem = "--mock-port needs --mock"
    elif args.upstream is not None:
        problem = "--mock is the upstream: give --mock or --upstream, not both"
    source = args.providers or os.environ.get("THINKPROXY_PROVIDERS_FILE") or None
    try:
        if problem is not None:
            raise ConfigError(problem)
        with simulated_serve(args.mock, args.mock_port or 0, Path(source) if source else None) as mock:
            args.upstream, args.providers = mock.upstream, str(mock.providers_file)
            mock.allow(os.environ)
            print(f"thinkproxy: {mock.banner()}", file=sys.stderr)
            return serve(args)
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 2
    return 0  # stopped by SIGTERM (_stopped_by_sigterm)


@contextmanager
def simulated_serve(dialect: str, port: int = 0, providers: Path | None = None) -> Iterator[SimulatedServe]:
    """The simulated upstream on a loopback `port` (0: any free one), on a thread of this process,
    and a providers file (`providers`, default the installed table, with its prefixes mapped)
    for as long as the context lasts. A ConfigError for an unknown dialect or a port in use."""
    from proxy.mock import MockOptions, create_mock_app
    from proxy.server.serving import BackgroundServer

    if dialect not in SIMULATED_ROUTES:
        raise ConfigError(
            f"--mock: unknown simulated provider {dialect!r}; choose one of {', '.join(SIMULATED_ROUTES)}"
        )
    try:
        server = BackgroundServer(create_mock_app(MockOptions()), port=port)
    except OSError as exc:
        raise ConfigError(f"--mock-port {port}: cannot listen there ({exc.strerror or exc})") from None
    with _stopped_by_sigterm(), server, TemporaryDirectory(prefix="thinkproxy-mock-") as directory:
        path = Path(directory) / "providers.yaml"
        path.write_text(simulated_providers_text(server.port, providers), encoding="utf-8")
        yield SimulatedServe(server.url, dialect, path)


class _Stopped(Exception):
    pass


@contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """uvicorn, once it has shut down on a SIGTERM, raises the signal again with the handler it
    found; by default that ends the process at once, leaving the simulated upstream unstopped and
    the providers file behind. Here it unwinds the context instead, and the process exits 0."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except _Stopped:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
