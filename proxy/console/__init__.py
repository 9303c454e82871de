"""The web console: a live view of the requests through this proxy, and a playground.

`Console.from_settings` builds it when `THINKPROXY_UI` is on: its `feed` is a listener
(proxy.core.events) and `routes()` are mounted by the app. See docs/console.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.routing import BaseRoute

from proxy.console.feed import Feed
from proxy.console.routes import AdminAccess, ConsoleRoutes
from proxy.core.config.tool_titles import ToolTitles
from proxy.settings import Settings

__all__ = ["AdminAccess", "Console", "Feed"]


@dataclass(slots=True)
class Console:
    feed: Feed
    access: AdminAccess
    titles: ToolTitles

    @classmethod
    def from_settings(cls, settings: Settings, titles: ToolTitles) -> Console:
        """Raises ConfigError when the settings would expose the live view (see AdminAccess)."""
        access = AdminAccess.from_settings(settings)
        feed = Feed(settings.ui_history)
        if settings.state_url is not None:
            from proxy.console.shared import SharedFeed  # redis is imported only when it is used

            feed.shared = SharedFeed(
                settings.state_url.get_secret_value(), history=settings.ui_history, replica=feed.replica
            )
        return cls(feed, access, titles)

    def routes(self) -> list[BaseRoute]:
        return ConsoleRoutes(self.feed, self.access, self.titles).routes()

    async def aclose(self) -> None:
        if self.feed.shared is not None:
            await self.feed.shared.aclose()
