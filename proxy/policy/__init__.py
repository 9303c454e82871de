"""Thinking policy for gateways (THINKPROXY_POLICY_FILE): per-key level ceilings, reasoning-token
budgets in rolling windows, and usage with its cost. The file's schema and the window arithmetic
are pure (proxy.core.config.policy_file, proxy.core.policy.budgets); this package keeps the counts and applies
the rules to requests."""
