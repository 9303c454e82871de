"""The simulated upstream: an OpenAI-compatible server that answers in each provider's own shape.

Used by `thinkproxy demo`, `thinkproxy mock-upstream` and the test suite. See `app` for the
routes, `dialects` for the provider shapes, `scenarios` for what it answers, `faults` for the
failures it can be asked to produce, `responses` for OpenAI's Responses API (with `responses_input`,
`responses_replay`, `responses_output` and `responses_seal`).
"""

from proxy.mock.app import DIALECTS, MockOptions, create_mock_app
from proxy.mock.sending import MockDisconnect

__all__ = ["DIALECTS", "MockDisconnect", "MockOptions", "create_mock_app"]
