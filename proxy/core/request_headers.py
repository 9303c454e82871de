"""Request headers the proxy refuses to take for anything else: control-header look-alikes.

Pure. (The client's header bytes themselves travel unchanged: see the upstream clients.)
"""

from __future__ import annotations

from collections.abc import Iterable

from proxy.core.controls import CONTROL_HEADERS
from proxy.core.errors import BadRequest

# Spelled with underscores (`X_Thinking_Level`), a control header would be neither read nor
# stripped, and an upstream that folds `_` into `-` (CGI, WSGI, several gateways) would read it as
# the real one. The proxy refuses such a request instead of guessing what was meant.
_LOOK_ALIKES = {name.replace("-", "_"): name for name in CONTROL_HEADERS}


def refuse_control_header_look_alikes(names: Iterable[str]) -> None:
    """400 for a header that is a control header spelled with underscores (names lower-case)."""
    for name in names:
        if "_" in name:
            meant = _LOOK_ALIKES.get(name.replace("-", "_"))
            if meant is not None:
                shown = "-".join(p.capitalize() for p in meant.split("-"))
                raise BadRequest(
                    f"Header {name!r} looks like the proxy's {shown} header spelled with underscores; "
                    f"spell it {shown} (with hyphens), or leave it out.",
                    code="invalid_header",
                    param=name,
                )
