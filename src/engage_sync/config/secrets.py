"""Secrets come from the environment at run time, never from files in the repo.

`${NAME}` (or `${NAME:-default}`) references in a warehouse or service URL are expanded from
the environment; the API key is read from the variable the integration names. Errors name the
variable, never a value, and `redact_url` hides the password of a URL before it is logged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import make_url

from engage_sync.errors import ConfigError

ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
"""A portable environment variable name (POSIX shells accept no other)."""
REFERENCE = re.compile(r"\$\{(" + ENV_NAME + r")(?::-([^}]*))?\}")
"""A reference to an environment variable: `${NAME}` or `${NAME:-default}`."""
_REF = REFERENCE
_ENV_NAME = re.compile(ENV_NAME)


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot name an environment variable, without repeating it, or None."""
    if _ENV_NAME.fullmatch(name):
        return None
    return ("must be the name of an environment variable (letters, digits and '_', not "
            "starting with a digit), such as ENGAGE_API_KEY; never the key itself")


def expand(value: str, env: Mapping[str, str] | None = None, *, integration: str, key: str) -> str:
    env = os.environ if env is None else env

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name not in env and default is not None:
            return default
        if name not in env:
            raise ConfigError(
                f"integration {integration}: environment variable {name} is not set "
                f"(referenced by '{key}'); export it before the run",
                key=key,
            )
        return env[name]

    return _REF.sub(sub, value)


def expand_all(value: Any, env: Mapping[str, str] | None = None, *, integration: str,
               key: str) -> Any:
    """`value` with the references of every string in it expanded (`expand`), nested mappings
    and lists included; a missing variable is a ConfigError naming its key (`key.sub`)."""
    if isinstance(value, str):
        return expand(value, env, integration=integration, key=key)
    if isinstance(value, dict):
        return {k: expand_all(v, env, integration=integration, key=f"{key}.{k}")
                for k, v in value.items()}
    if isinstance(value, list):
        return [expand_all(v, env, integration=integration, key=f"{key}[{n}]")
                for n, v in enumerate(value)]
    return value


def connect_args(warehouse_args: Mapping[str, Any], integration: str) -> dict[str, Any]:
    """`warehouse.connect_args` as the driver gets them: every reference expanded."""
    return dict(expand_all(dict(warehouse_args), integration=integration,
                           key="warehouse.connect_args"))


def api_key(integration: str, env_var: str, env: Mapping[str, str] | None = None) -> str:
    problem = env_name_problem(env_var)
    if problem is not None:  # no shell command is suggested from a name that is not one
        raise ConfigError(f"integration {integration}: 'service.api_key_env' {problem}",
                          key="service.api_key_env")
    env = os.environ if env is None else env
    key = env.get(env_var, "")
    if not key:
        raise ConfigError(
            f"integration {integration}: the API key variable {env_var} is empty or not set; "
            f"export {env_var}=<your REST API key> (or change 'service.api_key_env')",
            key="service.api_key_env",
        )
    return key


def redact_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"
