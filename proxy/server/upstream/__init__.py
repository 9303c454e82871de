"""The upstream HTTP clients: the only outbound I/O of the proxy.

One client per app, chosen by `THINKPROXY_HTTP_TRANSPORT`: `aiohttp` (default) drives an aiohttp
session directly (`aiohttp_client`); `httpx` sends through an httpx transport (`httpx_client`),
which is also how tests inject `httpx.MockTransport` / respx. Both hand the handlers the same
`UpstreamResponse` (`common`), where transport exceptions of either become the proxy's errors;
`policy` which upstreams a client may choose; `factory`
builds the client the settings ask for. (Nothing is imported here: the egress guard imports
`policy`, and `factory` imports the egress guard.)

Requests skip every client-level extra: a proxy wants no cookie jar shared by all its users, no
redirect following, no default User-Agent or Accept-Encoding of its own.
"""
