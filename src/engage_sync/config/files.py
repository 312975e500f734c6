"""Integration files (YAML) read into `Integration` models, and found in a folder.

A bad file raises `ConfigError` naming the file, the key and the fix, never a value (a value
may be a secret): the validation errors are told by key and rule only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from engage_sync.config import yaml_text
from engage_sync.config.alerts import (
    Alerts,
    defaults_path,
    folder_defaults_problem,
    with_folder_defaults,
)
from engage_sync.config.integration import Integration
from engage_sync.errors import ConfigError

_SECRET_WORDS = ("key", "password", "secret", "token")


def _describe(err: ValidationError, under: str = "") -> str:
    """Each error as key and rule, never the value (models hide input; messages name keys)."""
    parts = []
    for e in err.errors(include_input=False, include_url=False):
        loc = ".".join(str(p) for p in (*([under] if under else []), *e["loc"])) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "is not a key here; check its spelling and place"
            if any(w in str(e["loc"][-1]).lower() for w in _SECRET_WORDS):
                msg += (". Never write a secret in this file: export it in an environment "
                        "variable and name the variable in 'service.api_key_env' (API key) "
                        "or as ${VAR} in 'warehouse.url' (password)")
        parts.append(f"key '{loc}': {msg}")
    return "; ".join(parts)


def parse_integration(raw: Any, *, file: str) -> Integration:
    """A mapping (as read from YAML) → Integration. Raises ConfigError naming file and key,
    raised outside the `except` so no exception holding the file's values is chained to it."""
    if not isinstance(raw, dict):
        raise ConfigError("the file must hold a mapping of keys (name, kind, source, ...)",
                          file=file)
    raw = {"name": Path(file).stem, **raw}
    try:
        return Integration.model_validate(raw)
    except ValidationError as exc:
        problem = (f"{_describe(exc)}; fix the file (its keys are listed in the README) "
                   "and run again")
    raise ConfigError(problem, file=file)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, without the snippet of the file PyYAML quotes (it may hold a secret)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = getattr(exc, "problem", None) or type(exc).__name__
    return f"not valid YAML{where}: {what}"


def load_integration(path: str | Path) -> Integration:
    """Read and validate one integration file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror})", file=str(path)) from exc
    try:
        raw = yaml_text.load(text)
    except yaml.YAMLError as exc:
        problem = _yaml_problem(exc)
    else:
        return parse_integration(with_folder_defaults(raw, folder_defaults(path)),
                                 file=str(path))
    raise ConfigError(problem, file=str(path))


def folder_defaults(integration_file: Path) -> dict[str, Any] | None:
    """The folder's `_defaults.yaml` (`config/alerts.py`), checked on its own so that a bad
    key names that file; None when the folder has none."""
    path = defaults_path(integration_file)
    if not path.is_file():
        return None
    try:
        raw = yaml_text.load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        said = (_yaml_problem(exc) if isinstance(exc, yaml.YAMLError)
                else f"cannot read the file ({exc.strerror})")
        raise ConfigError(said, file=str(path)) from None
    if raw is None:
        return None
    problem = folder_defaults_problem(raw)
    if problem is None:
        try:
            Alerts.model_validate(raw["alerts"])
        except ValidationError as exc:
            problem = _describe(exc, "alerts")
    if problem is not None:
        raise ConfigError(f"{problem}; it applies to every integration file of the folder",
                          file=str(path))
    return dict(raw)


def integration_files(folder: str | Path) -> list[Path]:
    """The integration files of a folder, sorted by name (files starting with '_' are skipped)."""
    folder = Path(folder)
    return sorted(
        p for p in [*folder.glob("*.yaml"), *folder.glob("*.yml")] if not p.name.startswith("_")
    )


def resolve_integration(name_or_path: str, config_dir: str | None = None) -> Path:
    """An integration file path, or a name looked up as `<config dir>/<name>.yaml` (the folder
    is `config_dir`, else ENGAGE_SYNC_CONFIG_DIR, else ./config). Raises ConfigError."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    folder = config_dir or os.environ.get("ENGAGE_SYNC_CONFIG_DIR", "config")
    candidate = Path(folder) / f"{name_or_path}.yaml"
    if not candidate.exists():
        raise ConfigError(
            f"no integration '{name_or_path}': give a file path or a name with a file "
            f"{candidate} (the folder is --config-dir / config_dir or ENGAGE_SYNC_CONFIG_DIR)")
    return candidate
