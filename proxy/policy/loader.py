"""Reading the policy file, at start (`serve` and `check` refuse a bad one before binding a port)
and again on SIGHUP (proxy.server.reload keeps the running policy when the new file is bad)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proxy.core.config.policy_file import Policy, parse_policy
from proxy.core.config.yamlfile import decode_config
from proxy.core.errors import ConfigError
from proxy.core.gateway import ClientKey

SETTING = "THINKPROXY_POLICY_FILE"


def load_policy(path: Path, client_keys: Sequence[ClientKey]) -> Policy:
    """The policy in `path` for these client keys; ConfigError (one line per fault) when the file
    cannot be read or is wrong, or when the keys cannot carry a policy: budgets and usage are
    counted per key name, so gateway mode with every key named is required for `keys` and budgets
    (without client keys, BYOK, the file's `default` ceiling and default level and its `auto` rules
    apply to every request)."""
    unnamed = sum(1 for key in client_keys if key.name is None)
    if unnamed:
        raise ConfigError(
            f"{SETTING}: {unnamed} of THINKPROXY_CLIENT_KEYS has no name; budgets and usage are counted "
            "per name, so write each as name:key"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{SETTING}: cannot read {path}: {exc.strerror or exc}") from None
    names = [key.name for key in client_keys if key.name is not None]
    return parse_policy(decode_config(data, str(path)), str(path), names, gateway=bool(client_keys))
