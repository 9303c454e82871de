"""The simulated upstream's `POST /v1/embeddings`: deterministic unit vectors (a text's vector
depends only on the text), as floats or base64 as OpenAI's `encoding_format` asks. Pure.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

import orjson

from proxy.mock.dialects import tokens

EMBEDDING_DIMENSIONS = 16


def embeddings(body: dict[str, Any]) -> dict[str, Any]:
    raw = body["input"]
    inputs = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
    dimensions = body.get("dimensions")
    size = dimensions if isinstance(dimensions, int) and 0 < dimensions <= 4096 else EMBEDDING_DIMENSIONS
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        vector = vector_of(item if isinstance(item, str) else orjson.dumps(item).decode(), size)
        embedding: Any = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode() if as_base64 else vector
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    used = sum(tokens(i) if isinstance(i, str) else len(i) if isinstance(i, list) else 1 for i in inputs)
    return {
        "object": "list",
        "data": data,
        "model": str(body.get("model") or "text-embedding-3-small"),
        "usage": {"prompt_tokens": used, "total_tokens": used},
    }


def vector_of(text: str, size: int) -> list[float]:
    """A unit vector that depends only on the text."""
    digest = b""
    counter = 0
    while len(digest) < size * 2:
        digest += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    values = [int.from_bytes(digest[2 * i : 2 * i + 2], "little") / 32767.5 - 1.0 for i in range(size)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [round(v / norm, 6) for v in values]
