"""`thinkproxy` command line: serve, demo, mock-upstream, explain, check."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotenv import dotenv_values
from pydantic import ValidationError

from proxy import __version__
from proxy.build_info import build_label
from proxy.core.errors import ConfigError

if TYPE_CHECKING:
    from proxy.settings import Settings


def _settings_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        # A validator's own message reads best without pydantic's "Value error, " in front.
        message = err["msg"].removeprefix("Value error, ")
        lines.append(f"  THINKPROXY_{field.upper()}: {message}")
    return "invalid settings:\n" + "\n".join(lines)


@contextmanager
def _naming(variable: str) -> Iterator[None]:
    """A ConfigError about a file a setting names, said with the setting's name in front."""
    try:
        yield
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if variable in text else f"{variable}: {text}") from None


def _route_key_variables() -> set[str]:
    """The variables the routes file's `api_key_env` fields name (none when there is no readable
    file: its errors are reported where it is loaded)."""
    from proxy.core.config.routing import RouteTable

    path = os.environ.get("THINKPROXY_ROUTES_FILE")
    if not path:
        return set()
    try:
        table = RouteTable.load(Path(path), None)
    except ConfigError:
        return set()
    return {route.api_key_env for route in table.routes if route.api_key_env}


def cmd_serve(args: argparse.Namespace) -> int:
    if args.mock is None and args.mock_port is None:
        return _serve(args)
    from proxy.simulated import serve_simulated

    return serve_simulated(args, _serve)


def _serve(args: argparse.Namespace) -> int:
    from proxy.console import AdminAccess
    from proxy.core.config.providers import ProvidersTable
    from proxy.core.config.tool_titles import load_tool_titles
    from proxy.core.gateway import GatewayAuth
    from proxy.policy.loader import load_policy
    from proxy.server.access_log import configure_logging
    from proxy.server.app import load_routes
    from proxy.server.serving import raise_fd_limit
    from proxy.server.upstream.policy import UpstreamPolicy
    from proxy.settings import Settings, unknown_variables

    # Flags become environment so every worker process builds the same Settings.
    for flag, env in (
        ("host", "HOST"),
        ("port", "PORT"),
        ("workers", "WORKERS"),
        ("upstream", "UPSTREAM_BASE_URL"),
        ("providers", "PROVIDERS_FILE"),
        ("routes", "ROUTES_FILE"),
        ("ui", "UI"),
    ):
        value = getattr(args, flag)
        if value is not None:
            os.environ[f"THINKPROXY_{env}"] = str(value)
    # (A route's api_key_env may name a THINKPROXY_* variable of the operator's own: not a typo.)
    names = (set(os.environ) | set(dotenv_values(".env"))) - _route_key_variables()
    for unknown in unknown_variables(names):
        print(f"thinkproxy: warning: {unknown}", file=sys.stderr)
    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"thinkproxy: {_settings_error(exc)}", file=sys.stderr)
        return 2
    if settings.upstream_base_url is None and not settings.allowed_upstreams and not settings.routes_file:
        print(
            "thinkproxy: no upstream configured. Set THINKPROXY_UPSTREAM_BASE_URL "
            "(e.g. https://api.deepseek.com/v1), pass --upstream URL, or give a routes file "
            "(THINKPROXY_ROUTES_FILE).",
            file=sys.stderr,
        )
        return 2
    try:  # fail before binding the port, not per request
        with _naming("THINKPROXY_PROVIDERS_FILE"):
            ProvidersTable.load(settings.providers_file)
        with _naming("THINKPROXY_ROUTES_FILE"):
            routes, keys = load_routes(settings)
        gateway = GatewayAuth.from_settings(settings, keys)  # (its messages name their variables)
        if settings.policy_file is not None:
            load_policy(settings.policy_file, gateway.client_keys)
        UpstreamPolicy.from_settings(settings)
        with _naming("THINKPROXY_TOOL_TITLES_FILE"):
            load_tool_titles(settings.tool_titles_file)
        if settings.ui:
            AdminAccess.from_settings(settings)
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_json)
    warning = raise_fd_limit(settings.max_client_connections + settings.max_upstream_connections + 64)
    if warning is not None:
        print(f"thinkproxy: warning: {warning}", file=sys.stderr)
    target = settings.upstream_base_url or "(X-Upstream-Base-URL, allow-listed)"
    if routes is not None:
        target = f"{len(routes.routes)} route(s) from {settings.routes_file}"
    print(
        f"thinkproxy {__version__}: http://{settings.host}:{settings.port}/v1 -> {target} "
        f"[{settings.workers} worker(s), transport {settings.http_transport}, {build_label()}]",
        file=sys.stderr,
    )
    if settings.ui:
        print(f"thinkproxy: console at http://{settings.host}:{settings.port}/ui", file=sys.stderr)
        if settings.workers > 1 and settings.state_url is None:
            print(
                "thinkproxy: note: each worker's console shows only its own requests; set "
                "THINKPROXY_STATE_URL=redis://… to see every worker's (and every replica's)",
                file=sys.stderr,
            )
    from proxy.server.doors.native_owners import split_records_warning

    if (split := split_records_warning(settings)) is not None:
        print(f"thinkproxy: warning: {split}", file=sys.stderr)
    share_worker_secret(settings, os.environ)
    from proxy.telemetry.multiprocess import metrics_directory

    try:
        with metrics_directory(metrics=settings.metrics, workers=settings.workers):
            _run_uvicorn(settings)
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 2
    return 0


def share_worker_secret(settings: Settings, environ: MutableMapping[str, str]) -> None:
    """Workers of one `serve` must agree on the deployment secret: a blob sealed by one (a
    Responses reasoning item's encrypted_content) is opened by whichever gets the next turn.
    Without THINKPROXY_STATE_SECRET or a state URL each process would draw its own, so the parent
    draws one for all of them (a restart draws a new one: set the variable to keep blobs valid)."""
    if settings.workers > 1 and settings.state_secret is None and settings.state_url is None:
        environ["THINKPROXY_STATE_SECRET"] = secrets.token_urlsafe(32)


def _run_uvicorn(settings: Settings) -> None:
    import uvicorn

    from proxy.server.edge import EdgeProtocol
    from proxy.server.limits import EdgeLimits
    from proxy.server.websocket_protocol import WS_PROTOCOL

    limits = EdgeLimits.from_settings(settings)
    uvicorn.run(
        "proxy.server.app:create_served_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        loop=settings.loop,
        http=EdgeProtocol.factory(limits),
        ws_max_size=limits.ws_message_bytes,
        ws=WS_PROTOCOL,
        access_log=False,
        log_level=settings.log_level,
        timeout_graceful_shutdown=int(settings.shutdown_timeout),
        server_header=False,
    )


def cmd_mock_upstream(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.mock import DIALECTS, MockOptions, create_mock_app

    if args.dialect not in DIALECTS:
        print(
            f"thinkproxy: unknown dialect {args.dialect!r}; choose one of {', '.join(DIALECTS)}",
            file=sys.stderr,
        )
        return 2
    app = create_mock_app(MockOptions(default_dialect=args.dialect, pace_ms=args.pace_ms))
    print(
        f"simulated upstream on http://{args.host}:{args.port}/v1 (dialect {args.dialect}); "
        f"other dialects at /<dialect>/v1: {', '.join(DIALECTS)}; requests received: GET /_mock/requests",
        file=sys.stderr,
    )
    uvicorn.run(app, host=args.host, port=args.port, loop="uvloop", http="httptools", access_log=False)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from proxy.demo import run_demo

    return run_demo(color=not args.no_color and sys.stdout.isatty(), keep=args.keep, port=args.port)


def cmd_explain(args: argparse.Namespace) -> int:
    import orjson

    from proxy.core.config.providers import ProvidersTable
    from proxy.core.config.routing import RouteTable
    from proxy.core.controls import Level
    from proxy.core.errors import ProxyError
    from proxy.core.policy.auto_rules import BUILT_IN
    from proxy.explain import auto_rules_in, explain, explain_routed

    level: str | None = None
    if args.level is not None:
        level = args.level.strip().lower()
        if level not in {*(m.value for m in Level), "auto"}:
            print(
                f"thinkproxy: --level must be one of {', '.join(m.value for m in Level)}, auto",
                file=sys.stderr,
            )
            return 2
    body = None
    if args.body:
        try:
            body = orjson.loads(Path(args.body).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            print(f"thinkproxy: cannot read --body {args.body}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(body, dict):
            print("thinkproxy: --body must hold a JSON object", file=sys.stderr)
            return 2
    routes_path = args.routes or os.environ.get("THINKPROXY_ROUTES_FILE") or None
    if args.base_url is None and routes_path is None:
        print(
            "thinkproxy: give --base-url URL, or --routes FILE to pick the upstream by model", file=sys.stderr
        )
        return 2
    policy_path = args.policy or os.environ.get("THINKPROXY_POLICY_FILE") or None
    try:
        table = ProvidersTable.load(Path(args.providers) if args.providers else None)
        routes = RouteTable.load(Path(routes_path)) if routes_path and args.base_url is None else None
        rules = auto_rules_in(Path(policy_path)) if policy_path else BUILT_IN
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 1
    if routes is None:
        print(explain(table, args.base_url, level, model=args.model, body=body, zh=args.zh, rules=rules))
        return 0
    try:
        print(explain_routed(table, routes, level, model=args.model, body=body, zh=args.zh, rules=rules))
    except ProxyError as exc:  # no route takes the model: what a request would get as a 404
        print(f"thinkproxy: {exc.message}", file=sys.stderr)
        return 1
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from proxy.core.config.providers import ProvidersTable, default_providers_path
    from proxy.core.config.routing import RouteTable, key_environment, resolve_route_keys

    path = Path(args.file) if args.file else default_providers_path()
    try:
        table = ProvidersTable.load(path)
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: OK ({len(table.entry_names)} entries: {', '.join(table.entry_names)})")
    environ = key_environment(os.environ)
    if _check_tool_titles(environ.get("THINKPROXY_TOOL_TITLES_FILE") or None) != 0:
        return 1
    policy_path = args.policy or environ.get("THINKPROXY_POLICY_FILE") or None
    if policy_path is not None and _check_policy(Path(policy_path), environ) != 0:
        return 1
    routes_path = args.routes or os.environ.get("THINKPROXY_ROUTES_FILE") or None
    if routes_path is None:
        return 0
    # The same checks as `serve`: the file itself, and in gateway mode every route's key variable.
    gateway = bool(environ.get("THINKPROXY_CLIENT_KEYS", "").strip())
    try:
        routes = RouteTable.load(Path(routes_path), environ.get("THINKPROXY_UPSTREAM_BASE_URL") or None)
        resolve_route_keys(routes, environ, gateway=gateway)
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 1
    print(f"{routes_path}: OK ({len(routes.routes)} routes)")
    for route in routes.routes:
        print(f"  {routes.describe(route)}; provider entry {table.match(route.upstream).name}")
    return 0


def _check_tool_titles(path: str | None) -> int:
    """The tool titles file `serve` would read (THINKPROXY_TOOL_TITLES_FILE), if one is set (0: fine)."""
    from proxy.core.config.tool_titles import load_tool_titles

    if path is None:
        return 0
    try:
        with _naming("THINKPROXY_TOOL_TITLES_FILE"):
            titles = load_tool_titles(Path(path))
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 1
    print(f"{path}: OK ({len(titles)} tool title(s))")
    return 0


def _check_policy(path: Path, environ: Mapping[str, str]) -> int:
    """The policy file, checked against the client keys as `serve` would (0: fine)."""
    from proxy.core.gateway import parse_client_keys
    from proxy.policy.loader import load_policy

    items = [item for item in environ.get("THINKPROXY_CLIENT_KEYS", "").split(",") if item.strip()]
    try:
        policy = load_policy(path, parse_client_keys(items))
    except ConfigError as exc:
        print(f"thinkproxy: {exc}", file=sys.stderr)
        return 1
    budgets = ", ".join(f"{name} {budget.limit}/{budget.per}" for name, budget in policy.budgets.items())
    rules, prices = len(policy.keys), len(policy.prices)
    print(f"{path}: OK ({rules} key rule(s); budgets: {budgets or 'none'}; {prices} price(s))")
    return 0


class _VersionAction(argparse.Action):
    """`--version`, with the build (proxy.build_info), found only when asked: finding it imports
    the whole core, which other commands may not need."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and build, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"thinkproxy {__version__} ({build_label()})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thinkproxy",
        description="OpenAI-compatible proxy: one header picks the thinking level on any provider.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the proxy (settings from THINKPROXY_* variables)")
    serve.add_argument("--host", help="bind address (THINKPROXY_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (THINKPROXY_PORT, default 8080)")
    serve.add_argument("--workers", type=int, help="worker processes (THINKPROXY_WORKERS, default 1)")
    serve.add_argument("--upstream", help="upstream base URL (THINKPROXY_UPSTREAM_BASE_URL)")
    serve.add_argument("--providers", help="providers.yaml to use (THINKPROXY_PROVIDERS_FILE)")
    serve.add_argument("--routes", help="routes file (THINKPROXY_ROUTES_FILE)")
    serve.add_argument(
        "--ui", action="store_const", const="true", help="serve the web console at /ui (THINKPROXY_UI)"
    )
    serve.add_argument(
        "--mock",
        nargs="?",
        const="deepseek",
        metavar="PROVIDER",
        help="offline: proxy to the simulated PROVIDER (default deepseek), run in this process",
    )
    serve.add_argument("--mock-port", type=int, help="the simulated upstream's port (default: any free one)")
    serve.set_defaults(func=cmd_serve)

    demo = sub.add_parser("demo", help="run the proxy against the simulated upstream and show a timeline")
    demo.add_argument("--no-color", action="store_true")
    demo.add_argument(
        "--keep", action="store_true", help="keep the proxy and its console (/ui) running afterwards"
    )
    demo.add_argument("--port", type=int, default=0, help="the proxy's port (default: any free one)")
    demo.set_defaults(func=cmd_demo)

    mock = sub.add_parser("mock-upstream", help="run the simulated upstream alone")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=8090)
    mock.add_argument("--dialect", default="deepseek")
    mock.add_argument("--pace-ms", type=float, default=0.0, help="delay between streamed chunks")
    mock.set_defaults(func=cmd_mock_upstream)

    explain = sub.add_parser("explain", help="show the entry that matches and the exact body sent upstream")
    explain.add_argument("--base-url", help="the upstream (or give --routes to pick it by --model)")
    explain.add_argument("--routes", help="routes file (default: THINKPROXY_ROUTES_FILE)")
    explain.add_argument(
        "--level",
        help="off | standard | deep | auto, as X-Thinking-Level (default: none; a model suffix may name one)",
    )
    explain.add_argument("--model", help="the model, with a level suffix if you like: deepseek-v4-pro(deep)")
    explain.add_argument(
        "--policy", help="policy file whose auto rules apply (default: THINKPROXY_POLICY_FILE)"
    )
    explain.add_argument("--body", help="a JSON request body file (default: a small example)")
    explain.add_argument("--providers", help="providers.yaml to use")
    explain.add_argument("--zh", action="store_true", help="use the Chinese instructions for prompted levels")
    explain.set_defaults(func=cmd_explain)

    check = sub.add_parser(
        "check", help="validate a providers file (and the routes, policy, tool titles files)"
    )
    check.add_argument("file", nargs="?", help="default: the providers.yaml in use")
    check.add_argument("--routes", help="routes file to validate too (default: THINKPROXY_ROUTES_FILE)")
    check.add_argument(
        "--policy",
        help="policy file to validate too, against THINKPROXY_CLIENT_KEYS (default: THINKPROXY_POLICY_FILE)",
    )
    check.set_defaults(func=cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
