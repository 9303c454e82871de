"""The reviewers' API: `GET /thinkproxy/reviews`, `GET` and `POST /thinkproxy/reviews/{id}`.

Reviewer keys only, as `Authorization: Bearer <key>`: no key or an unknown one is a 401, a key
that is this proxy's but not a reviewer's (a client key, an admin key) a 403. A malformed decision
is a 400 naming the field and the review stays pending; an unknown id a 404; a second decision a
409. Each accepted decision writes one audit line (proxy.review.service.audit).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.errors import ProxyError, Unauthorized
from proxy.gateway import ClientKey, find_key, presented_key
from proxy.review.hub import Posted
from proxy.review.policy import parse_decision
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


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


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
        try:
            self._reviewer(request)
        except ProxyError as exc:
            return _json(exc.payload(), exc.status)
        pending = await self.service.hub.pending()
        pending.sort(key=lambda c: c.created)
        return _json({"object": "list", "data": [c.listing() for c in pending]})

    async def show(self, request: Request) -> Response:
        try:
            self._reviewer(request)
            review_id = request.path_params["review_id"]
            call = await self.service.hub.get(review_id)
            if call is None:
                raise ReviewNotFound(f"No pending review {review_id!r} (decided, expired or withdrawn).")
        except ProxyError as exc:
            return _json(exc.payload(), exc.status)
        return _json(call.detail())

    async def post(self, request: Request) -> Response:
        try:
            reviewer = self._reviewer(request)
            review_id = request.path_params["review_id"]
            decision = parse_decision(await request.body(), reviewer)
            call = await self.service.hub.get(review_id)
            posted = await self.service.hub.decide(review_id, decision)
            if posted is Posted.UNKNOWN:
                raise ReviewNotFound(f"No pending review {review_id!r} (expired or withdrawn).")
            if posted is Posted.ALREADY_DECIDED:
                raise AlreadyDecided(f"Review {review_id!r} was already decided; the first decision stands.")
        except ProxyError as exc:
            return _json(exc.payload(), exc.status)
        if call is not None:
            audit(call, decision, 200)
        return _json({"id": review_id, "decision": decision.verdict.value, "reviewer": reviewer})

    def routes(self) -> list[Route]:
        return [
            Route("/thinkproxy/reviews", self.index, methods=["GET"]),
            Route("/thinkproxy/reviews/{review_id}", self.show, methods=["GET"]),
            Route("/thinkproxy/reviews/{review_id}", self.post, methods=["POST"]),
        ]
