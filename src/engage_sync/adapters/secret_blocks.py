"""The API key (or another secret) from a Prefect Secret block named in the integration file.

Prefect is imported on first use, by the paths that run Prefect already (flows, partition
task runs); `engage-sync run --no-prefect` never calls this (`resources.service_key` refuses a
block there). Errors name the block and the key of the file, never a value.
"""

from __future__ import annotations

from engage_sync.errors import ConfigError


def secret_block(integration: str, name: str) -> str:
    """The value of the Prefect Secret block `name`, as text. Raises ConfigError naming the
    block when it cannot be read or holds no text."""
    from prefect.blocks.system import Secret

    try:
        value = Secret.load(name, _sync=True).get()  # type: ignore[call-arg, union-attr]
    except Exception as exc:
        raise ConfigError(
            f"integration {integration}: cannot read the Prefect Secret block {name!r} "
            f"('service.api_key_block'): {type(exc).__name__}; create it in the Prefect UI "
            f"(Blocks → Secret) or with `Secret(value=...).save({name!r})`",
            key="service.api_key_block") from None
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"integration {integration}: the Prefect Secret block {name!r} "
            "('service.api_key_block') holds no text; store the key as a string",
            key="service.api_key_block")
    return value
