"""SIGHUP: read the policy file and the routes file again, without a restart.

Each file is read and checked whole before anything changes; a file with a fault leaves the one in
use running, and the log says what was wrong in one line (the messages `check` prints, joined by
` | `): bytes that are not UTF-8, an alias bomb (proxy.core.config.yamlfile), a syntax error, each field at
fault. With `serve --workers N`, uvicorn's supervisor restarts its workers on SIGHUP, which reads
every file anew in each of them.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from asyncio import AbstractEventLoop
from collections.abc import Callable

from proxy.core.config.routing import RouteTable
from proxy.core.errors import ConfigError
from proxy.core.gateway import GatewayAuth
from proxy.policy.loader import load_policy
from proxy.policy.service import ThinkingPolicy
from proxy.server.handlers import Proxy
from proxy.server.models_listing import ModelsListing
from proxy.settings import Settings

LoadRoutes = Callable[[Settings], tuple[RouteTable | None, dict[int, str]]]

logger = logging.getLogger("thinkproxy.reload")


def one_line(exc: ConfigError) -> str:
    """A fault per line, as `check` prints them, joined into the one log line of a refused reload."""
    return " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def reload_files(proxy: Proxy, thinking: ThinkingPolicy | None, load_routes: LoadRoutes) -> list[str]:
    """Read both files again and swap in what checks out; what was reloaded, by name."""
    done: list[str] = []
    services = proxy.s
    settings = services.settings
    if thinking is not None and settings.policy_file is not None:
        try:
            thinking.policy = load_policy(settings.policy_file, services.gateway.client_keys)
            done.append(f"policy ({settings.policy_file})")
        except ConfigError as exc:
            logger.error("SIGHUP: the policy file was not reloaded, the one in use stays: %s", one_line(exc))
    if settings.routes_file is not None:
        try:
            routes, keys = load_routes(settings)
            gateway = GatewayAuth.from_settings(settings, keys)
        except ConfigError as exc:
            logger.error("SIGHUP: the routes file was not reloaded, the one in use stays: %s", one_line(exc))
        else:
            proxy.s = dataclasses.replace(services, routes=routes, gateway=gateway)
            listing = (
                None
                if routes is None
                else ModelsListing.from_settings(settings, routes, services.upstream, gateway)
            )
            proxy.listing = listing
            done.append(f"routes ({settings.routes_file})")
    if done:
        logger.warning("SIGHUP: reloaded %s", ", ".join(done))
    return done


def install(loop: AbstractEventLoop, reload: Callable[[], object]) -> Callable[[], None]:
    """Run `reload` on SIGHUP in this event loop; returns what removes the handler. (Where signals
    cannot be handled by the loop, e.g. not the main thread, nothing is installed.)"""
    try:
        loop.add_signal_handler(signal.SIGHUP, reload)
    except (NotImplementedError, RuntimeError, ValueError, AttributeError):
        return lambda: None

    def remove() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return remove
