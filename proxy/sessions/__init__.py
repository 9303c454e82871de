"""Agent sessions (docs/sessions.md): requests grouped by the session their client names, with
each request's facts, cost (genai-prices, or the policy's prices) and the sums; the sessions API
and the stats behind the console's charts."""
