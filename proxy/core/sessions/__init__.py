"""Pure parts of agent sessions (docs/sessions.md): identity from headers, per-request facts."""
