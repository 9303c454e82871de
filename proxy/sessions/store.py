"""The sessions this process saw: each one's sums, and the details of its newest requests.

Bounded three ways (docs/sessions.md, "Bounds"): sessions by count (the least recently active go
first), request details per session (a flood from one session drops its own oldest details, never
another session), and the details of all sessions by bytes (the least recently active sessions'
details go first). A session's sums outlive its details: they still count every request.

A detail is kept as its facts' values (proxy.core.sessions.facts.RequestFacts, a tuple), counted by
what they hold; their JSON is made when they are read.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Any

from proxy.core.sessions.facts import NO_LEVEL, RequestFacts, level_key
from proxy.policy.usage_book import ratio

MAX_MODELS = 16  # model names listed per session (a session rarely uses more than two)
DOORS = ("chat", "responses", "messages", "websocket", "passthrough")


class Session:
    """One session's sums (as this process counted them) and its newest request details.

    (A plain class with its fields set by hand: most sessions of a gateway's plain clients are
    one request long, so making one is on the request path; a dataclass with default factories
    took twice as long.)"""

    __slots__ = (
        "cached", "client", "cost", "detail_bytes", "details", "doors", "dropped", "errors", "first_at",
        "id", "input", "key", "last_at", "levels", "models", "output", "priced", "reasoning",
        "requests", "source", "tool_calls", "unpriced",
    )  # fmt: skip

    def __init__(self, session_id: str, source: str, client: str, key: str | None, first_at: int) -> None:
        self.id = session_id
        self.source = source
        self.client = client
        self.key = key
        self.first_at = first_at
        self.last_at = 0
        self.requests = self.input = self.cached = self.reasoning = self.output = 0
        self.priced = self.unpriced = self.errors = self.tool_calls = self.detail_bytes = self.dropped = 0
        self.cost = 0.0
        self.doors: list[str] = []
        self.models: list[str] = []
        self.levels: dict[str, int] = {"off": 0, "standard": 0, "deep": 0, NO_LEVEL: 0}
        self.details: deque[RequestFacts] = deque()

    def count(self, facts: RequestFacts) -> None:
        self.requests += 1
        at = facts.at
        if at > self.last_at:
            self.last_at = at
        if at < self.first_at:
            self.first_at = at
        door = facts.door
        if door not in self.doors:
            self.doors.append(door)
        model = facts.model
        if model and model not in self.models and len(self.models) < MAX_MODELS:
            self.models.append(model)
        self.levels[level_key(facts.level)] += 1
        usage = facts.usage
        if usage is not None:
            self.input += usage.input or 0
            self.cached += usage.cached_input or 0
            self.output += usage.output or 0
            if usage.reasoning is not None:
                self.reasoning += usage.reasoning.value
        spent = facts.cost_usd
        if spent is not None:
            self.cost += spent
            self.priced += 1
        elif usage is not None:  # (a request no model answered costs nothing: not "unpriced")
            self.unpriced += 1
        if facts.status >= 400:
            self.errors += 1
        self.tool_calls += len(facts.tools)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "client": self.client,
            "key": self.key,
            "doors": list(self.doors),
            "requests": self.requests,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "models": list(self.models),
            "levels": dict(self.levels),
            "tokens": {
                "input": self.input,
                "cached": self.cached,
                "reasoning": self.reasoning,
                "output": self.output,
            },
            "cache_hit_ratio": ratio(self.cached, self.input),
            "cost_usd": round(self.cost, 8) if self.priced else None,
            "cost_complete": self.unpriced == 0,
            "errors": self.errors,
            "tool_calls": self.tool_calls,
            "details_kept": len(self.details),
            "details_dropped": self.dropped,
        }


class SessionStore:
    def __init__(self, *, max_sessions: int, max_bytes: int, per_session: int) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.per_session = per_session
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently active first
        # The sessions still holding details, least recently active first: what the byte trim
        # walks (those whose details it dropped would otherwise be walked on every request).
        self._holding: OrderedDict[str, Session] = OrderedDict()
        # Responses chains: the session of each response this process answered, by tenant and id.
        self._responses: OrderedDict[tuple[str | None, str], str] = OrderedDict()
        self.detail_bytes = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def newest_first(self) -> Iterator[Session]:
        return reversed(self._sessions.values())

    def continued(self, tenant: str | None, response_id: str) -> str | None:
        """The session (unscoped id) of a response this process answered, if it remembers it."""
        return self._responses.get((tenant, response_id))

    def remember_response(self, tenant: str | None, response_id: str, session_id: str) -> None:
        responses = self._responses
        responses[(tenant, response_id)] = session_id
        # Chains are found by their newest responses: a few per kept session is plenty.
        while len(responses) > 4 * self.max_sessions:
            responses.popitem(last=False)

    def add(self, scoped_id: str, source: str, client: str, facts: RequestFacts) -> Session:
        """Count one finished request in its session (made on its first request) and keep its detail."""
        sessions = self._sessions
        session = sessions.get(scoped_id)
        if session is None:
            session = Session(scoped_id, source, client, facts.key, facts.at)
            sessions[scoped_id] = session
            while len(sessions) > self.max_sessions:
                gone_id, gone = sessions.popitem(last=False)
                self.detail_bytes -= gone.detail_bytes
                self._holding.pop(gone_id, None)
        else:
            sessions.move_to_end(scoped_id)
            if source == "responses" and session.source == "request":
                session.source = source  # a request on its own, now continued: a chain
        session.count(facts)
        size = facts.held()
        session.details.append(facts)
        session.detail_bytes += size
        self.detail_bytes += size
        holding = self._holding
        holding[scoped_id] = session
        holding.move_to_end(scoped_id)
        if len(session.details) > self.per_session:
            self._drop_oldest(session)
            if not session.details:
                del holding[scoped_id]
        if self.detail_bytes > self.max_bytes:
            self._trim(session)
        return session

    def _drop_oldest(self, session: Session) -> None:
        gone = session.details.popleft().held()
        session.detail_bytes -= gone
        session.dropped += 1
        self.detail_bytes -= gone

    def _trim(self, keep: Session) -> None:
        # The least recently active sessions' details go first; the newest detail of `keep`
        # (the request just counted) always stays. Only sessions holding details are walked.
        holding = self._holding
        while holding and self.detail_bytes > self.max_bytes:
            session_id, session = next(iter(holding.items()))
            if session is keep and len(session.details) == 1:
                return
            self._drop_oldest(session)
            if not session.details:
                del holding[session_id]
