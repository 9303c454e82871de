"""Front doors and upstream protocols: adapters around the one internal exchange.

The internal request is a chat-completions body (proxy.core.plan.request reads it); the internal event
stream is the normalized chat-chunk stream the response pipeline (proxy.core.stream.pipeline)
produces. A *front door* turns its wire request into the internal one and the internal events into
its wire events; an *upstream protocol* turns the internal request into its wire request and its
wire events into chat chunks before the pipeline. Everything between — the plan, the pipeline, the
trace, the replay store, the review gate, the listeners — is written once. See
docs/architecture.md.

A front door is a module with `NAME` and `parse_request(body) -> dict` (and an encoder of the
internal events when its wire is not chat's); today there is one, `chat`, whose adapters are the
identity.
"""
