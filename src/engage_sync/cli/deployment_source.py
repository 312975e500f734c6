"""The integration file behind a deployment, for commands that act on deployments by name.

`engage-sync backfill 10_users` names a deployment (`engage-sync/10_users`) served from any
folder (`serve.py config/demo`), while a name alone is looked up in the config folder
(`config/` by default). When the folder has no such file, the deployment's own `integration`
parameter says which file its runs use.
"""

from __future__ import annotations

from pathlib import Path

from engage_sync.errors import ConfigError


def deployment_integration(deployment: str) -> Path | None:
    """The `integration` parameter of a deployment, or None when the Prefect server does not
    know the deployment (or cannot be asked, or it has no such parameter)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            found = client.read_deployment_by_name(deployment)
    except Exception:  # unknown deployment, server unreachable: the caller's error says more
        return None
    value = (found.parameters or {}).get("integration")
    return Path(value) if isinstance(value, str) and value else None


def integration_for(name_or_path: str, config_dir: str, deployment: str) -> Path:
    """An integration file: a path, `<config dir>/<name>.yaml`, or the file `deployment` runs.
    Raises the config folder's ConfigError, with the deployment named, when none exists."""
    from engage_sync.config.files import resolve_integration

    try:
        return resolve_integration(name_or_path, config_dir)
    except ConfigError as exc:
        path = deployment_integration(deployment)
        if path is not None and path.exists():
            return path
        raise ConfigError(f"{exc}; nor does deployment {deployment} name an integration file "
                          f"on this machine") from exc
