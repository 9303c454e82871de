"""Telemetry the proxy emits: Prometheus metrics (proxy.telemetry.metrics), OpenTelemetry traces
(proxy.telemetry.otel, the optional `thinkproxy[otel]` extra) and request ids.

`build_telemetry` runs once per app (once per worker process) and returns what the app plugs in:
listeners, routes and what to close at shutdown. What is off is not built at all.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from starlette.routing import Route

from proxy.core.events import Listener
from proxy.settings import Settings
from proxy.telemetry.multiprocess import ENV as MULTIPROC_ENV


@dataclass
class Telemetry:
    listeners: list[Listener] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in self.closers:
            close()


def build_telemetry(
    settings: Settings, environ: Mapping[str, str] | None = None, known_models: Iterable[str] = ()
) -> Telemetry:
    """`known_models`: the model names the configuration writes out (facts.configured_models),
    always their own metrics label."""
    environ = os.environ if environ is None else environ
    telemetry = Telemetry()
    if settings.metrics:
        from proxy.telemetry.metrics import Metrics

        metrics = Metrics(
            max_models=settings.metrics_max_models,
            multiprocess_dir=environ.get(MULTIPROC_ENV) or None,
            known_models=known_models,
        )
        telemetry.listeners.append(metrics.listener())
        telemetry.routes.append(Route("/metrics", metrics.endpoint, methods=["GET"]))
        telemetry.closers.append(metrics.close)
    from proxy.telemetry.otel import otel_listener

    tracing = otel_listener(environ)
    if tracing is not None:
        telemetry.listeners.append(tracing)
        telemetry.closers.append(tracing.close)
    return telemetry
