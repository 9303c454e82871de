"""A simulated prompt cache, as DeepSeek's context caching works (on for every request, nothing to
ask): a request whose messages start with the same messages as an earlier request's (same model)
reads that prefix from the cache, counted in whole units of 64 tokens, and reports it as
`prompt_cache_hit_tokens` (and `prompt_tokens_details.cached_tokens`). Deterministic and
immediate (the real one is best effort); bounded (forgotten whole when full).

So an agent's tool loop — each request the previous one plus a turn — reports the cache hits a
real DeepSeek would, and what the proxy sums of them (the sessions' cache-hit ratio) is tested.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.scenarios import text_of, tokens

UNIT = 64  # DeepSeek counts cache hits in units of 64 tokens
MAX_PREFIXES = 100_000


class PromptCache:
    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def hit(self, body: Mapping[str, Any]) -> int:
        """The cached prompt tokens of this request (as count_tokens counts the prompt), and
        remember its prefixes for the next ones."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 0
        digest = hashlib.blake2b(str(body.get("model")).encode(), digest_size=16)
        counted = 3  # (count_tokens' base)
        cached = 0
        found: list[bytes] = []
        hitting = True  # (a prefix: every message so far was cached)
        for message in messages:
            if not isinstance(message, dict):
                break
            digest.update(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))
            key = digest.copy().digest()
            counted += 4 + tokens(text_of(message.get("content")))
            hitting = hitting and key in self._seen
            if hitting:
                cached = counted
            found.append(key)
        if len(self._seen) + len(found) > MAX_PREFIXES:
            self._seen.clear()
        self._seen.update(found)
        return cached // UNIT * UNIT
