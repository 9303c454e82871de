"""`X-Request-Id`: one id per request, the client's or a new one, returned, forwarded and logged.

- A client that sends `X-Request-Id` keeps its id: it is forwarded upstream as it came and
  returned. One that sends none gets a new one (32 hex digits), which is forwarded too.
- An unusable id (empty, longer than 200 characters, or anything but visible ASCII) is a 400
  naming the header; the error response carries a fresh id.
- The upstream's own `x-request-id` (OpenAI, DeepSeek… send one) is returned as
  `X-Upstream-Request-Id` and logged as `upstream_request_id`, so a provider's support can still
  be given their id while `X-Request-Id` means the same thing on every response.
"""

from __future__ import annotations

import os
import re

from proxy.core.errors import BadRequest
from proxy.core.events import AccessRecord

REQUEST_ID_HEADER = "x-request-id"
UPSTREAM_REQUEST_ID_HEADER = "x-upstream-request-id"
MAX_CHARS = 200
_USABLE = re.compile(rf"[\x21-\x7e]{{1,{MAX_CHARS}}}")


def new_request_id() -> str:
    # 128 random bits as 32 hex digits, as uuid4().hex wrote them (minus the version nibbles),
    # without building a UUID object per request.
    return os.urandom(16).hex()


def take_request_id(record: AccessRecord, sent: str | None) -> BadRequest | None:
    """Give `record` its request id (returned on every response, forwarded when generated).

    Returns the error to answer with when the client's id is unusable (the record then carries a
    fresh id, so even that error can be correlated); None otherwise. Never raises, so the caller
    can start its observers first and count the refusal like any other request.
    """
    error = None
    if sent is not None and _USABLE.fullmatch(sent) is None:
        error = BadRequest(
            f"Invalid X-Request-Id: expected 1 to {MAX_CHARS} visible ASCII characters "
            "(no spaces), or leave it out and the proxy assigns one.",
            code="invalid_request_id",
            param="X-Request-Id",
        )
        sent = None
    if sent is None:
        sent = new_request_id()
        record.forward_headers.append((REQUEST_ID_HEADER, sent))
    record.request_id = sent
    record.response_headers.append((REQUEST_ID_HEADER, sent))
    return error


def rename_upstream_request_id(headers: list[tuple[str, str]], record: AccessRecord) -> list[tuple[str, str]]:
    """The upstream's response headers with its `x-request-id` renamed `x-upstream-request-id`."""
    for i, (name, value) in enumerate(headers):
        if name.lower() == REQUEST_ID_HEADER:
            record.upstream_request_id = value[:MAX_CHARS]
            renamed = list(headers)
            renamed[i] = (UPSTREAM_REQUEST_ID_HEADER, value)
            return renamed
    return headers
