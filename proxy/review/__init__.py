"""Human review of sensitive tool calls: the policy and the gate (pure), the hub that waits for
decisions (memory or Redis), the reviewers' API and the glue into the relay."""
