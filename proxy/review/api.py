"""The reviewers' API: `GET /thinkproxy/reviews`, `GET` and `POST /thinkproxy/reviews/{id}`.

Reviewer keys only, as `Authorization: Bearer <key>`: no key or an unknown one is a 401, a key
that is this proxy's but not a reviewer's (a client key, an admin key) a 403. A malformed decision
is a 400 naming the field and the review stays pending; an unknown id a 404; a second decision a
409. A review store that cannot be reached or answers too slowly is a 503 with `Retry-After`; every
answer, errors included, is OpenAI-shaped JSON. Each accepted decision writes one audit line
(proxy.review.service.audit).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.core.errors import ProxyError, Unauthorized, quoted
from proxy.core.gateway import ClientKey, find_key, presented_key
from proxy.core.review.rules import parse_decision
from proxy.review.hub import Posted, StoreUnavailable
from proxy.review.service import ReviewService, audit


class NotAReviewer(ProxyError):
    status = 403
    type = "permission_error"
    code = "not_a_reviewer"


class ReviewNotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "review_not_found"


class AlreadyDecided(ProxyError):
    status = 409
    type = "invalid_request_error"
    code = "review_already_decided"


class ReviewStoreUnavailable(ProxyError):
    status = 503
    type = "api_error"
    code = "review_store_unavailable"


RETRY_AFTER_S = 2
log = logging.getLogger("thinkproxy.review")


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json", headers=headers)


def _error(exc: ProxyError) -> Response:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if exc.status == 503 else None
    return _json(exc.payload(), exc.status, headers)


Handler = Callable[[Request], Awaitable[Response]]


def json_errors(handler: Handler) -> Handler:
    """Every failure of a handler as a JSON answer: a store fault (Redis down, slow, an error
    reply) is a 503 the reviewer may retry, anything else a 500 whose traceback stays in the log."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except ProxyError as exc:
            return _error(exc)
        except (StoreUnavailable, OSError, TimeoutError):
            return _error(
                ReviewStoreUnavailable(
                    "The review store (THINKPROXY_STATE_URL) cannot be reached right now; retry shortly."
                )
            )
        except Exception:
            log.exception("The reviewers' API failed.")
            return _error(ProxyError("The reviewers' API failed (an internal error; see the proxy's log)."))

    return guarded


class ReviewAPI:
    def __init__(self, service: ReviewService, other_keys: Sequence[ClientKey]) -> None:
        self.service = service
        self.other_keys = other_keys  # this proxy's keys that are not reviewers' (client, admin)

    def _reviewer(self, request: Request) -> str:
        given = presented_key(request.headers.items())
        reviewer = find_key(given, self.service.reviewers)
        if reviewer is not None:
            # An unnamed key is named by its place in the setting, never by the key itself.
            return reviewer.name or f"reviewer-{self.service.reviewers.index(reviewer) + 1}"
        if find_key(given, self.other_keys) is not None:
            raise NotAReviewer("This key may not review tool calls: use one of THINKPROXY_REVIEWER_KEYS.")
        raise Unauthorized(
            "Reviewing needs 'Authorization: Bearer <reviewer key>' (THINKPROXY_REVIEWER_KEYS)."
        )

    async def index(self, request: Request) -> Response:
        self._reviewer(request)
        pending = await self.service.hub.pending()
        pending.sort(key=lambda c: c.created)
        return _json({"object": "list", "data": [c.listing() for c in pending]})

    async def show(self, request: Request) -> Response:
        self._reviewer(request)
        review_id = request.path_params["review_id"]
        call = await self.service.hub.get(review_id)
        if call is None:
            raise ReviewNotFound(f"No pending review {quoted(review_id)} (decided, expired or withdrawn).")
        return _json(call.detail())

    async def post(self, request: Request) -> Response:
        reviewer = self._reviewer(request)
        review_id = request.path_params["review_id"]
        decision = parse_decision(await request.body(), reviewer)
        call = await self.service.hub.get(review_id)
        posted = await self.service.hub.decide(review_id, decision)
        if posted is Posted.UNKNOWN:
            raise ReviewNotFound(f"No pending review {quoted(review_id)} (expired or withdrawn).")
        if posted is Posted.ALREADY_DECIDED:
            raise AlreadyDecided(
                f"Review {quoted(review_id)} was already decided; the first decision stands."
            )
        if call is not None:
            audit(call, decision, 200)
        return _json({"id": review_id, "decision": decision.verdict.value, "reviewer": reviewer})

    def routes(self) -> list[Route]:
        return [
            Route("/thinkproxy/reviews", json_errors(self.index), methods=["GET"]),
            Route("/thinkproxy/reviews/{review_id}", json_errors(self.show), methods=["GET"]),
            Route("/thinkproxy/reviews/{review_id}", json_errors(self.post), methods=["POST"]),
        ]
