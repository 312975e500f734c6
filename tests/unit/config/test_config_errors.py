"""A config error names the file, the key and the fix, and never
echoes a value of the file (a pasted API key above all), not even in its exception chain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engage_sync.config import secrets
from engage_sync.config.files import load_integration
from engage_sync.errors import ConfigError

KEY = "rk-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
BASE: dict[str, Any] = {"kind": "attributes", "source": {"table": "USERS"}}


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and every exception behind it (__cause__ and __context__)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is not None and all(e is not s for s in seen):
            seen.append(e)
            todo += [e.__cause__, e.__context__]
    return seen


def _refused(tmp_path: Path, text: str) -> ConfigError:
    path = tmp_path / "users.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_integration(path)
    error = raised.value
    for e in _chain(error):
        assert KEY not in str(e) and KEY not in repr(e), (type(e).__name__, str(e))
    assert "users.yaml" in str(error)
    return error


BAD_FILES = {
    "key pasted as service.api_key": f"service: {{api_key: {KEY}}}",
    "key as a duration": f"settle_lag: {KEY}",
    "key as an in_doubt policy": f"in_doubt: {KEY}",
    "key as a diff setting": f"diff: {KEY}",
    "key as a number": f"extract_batch_rows: {KEY}",
    "key as a bool": f"update_existing_only: {KEY}",
    "key in a list": f"row_key: {{a: {KEY}}}",
    "key as a section": f"mapping: {KEY}",
    "key in the url of a bad section": f"warehouse: {{url: [{KEY}]}}",
}


@pytest.mark.parametrize("line", BAD_FILES.values(), ids=list(BAD_FILES))
def test_no_value_of_the_file_in_a_config_error(tmp_path: Path, line: str) -> None:
    _refused(tmp_path, "kind: attributes\nsource: {table: USERS}\n" + line + "\n")


def test_broken_yaml_is_described_by_line_not_by_content(tmp_path: Path) -> None:
    error = _refused(tmp_path, f'kind: attributes\nservice:\n  api_key: "{KEY}\n  x: [\n')
    assert "line" in str(error)


def test_a_pasted_key_gets_the_fix(tmp_path: Path) -> None:
    text = str(_refused(tmp_path, f"kind: attributes\nsource: {{table: U}}\n"
                                  f"service: {{api_key: {KEY}}}\n"))
    assert "service.api_key" in text and "api_key_env" in text


BAD_NAMES = ["X; rm -rf /", "1ABC", "MY-KEY", "", "A B", "KEY$(id)", "ÄPI_KEY", KEY]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_api_key_env_must_name_a_variable(tmp_path: Path, name: str) -> None:
    """An `api_key_env` that is no variable name is refused naming file and key; never a shell
    command built from it."""
    error = str(_refused(tmp_path, "kind: attributes\nsource: {table: U}\n"
                                   f"service: {{api_key_env: {json.dumps(name)}}}\n"))
    assert "key 'service.api_key_env'" in error and "environment variable" in error
    assert "export" not in error and (not name or name not in error)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_api_key_lookup_never_suggests_a_command_from_a_bad_name(name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        secrets.api_key("users", name, env={name: "x"})
    assert "export" not in str(raised.value) and (not name or name not in str(raised.value))


@pytest.mark.parametrize("name", ["ENGAGE_API_KEY", "_K", "k2"])
def test_good_variable_names_are_taken(tmp_path: Path, name: str) -> None:
    path = tmp_path / "users.yaml"
    path.write_text(f"kind: attributes\nsource: {{table: U}}\nservice: {{api_key_env: {name}}}\n")
    assert load_integration(path).service.api_key_env == name
    assert secrets.api_key("users", name, env={name: "k"}) == "k"
    with pytest.raises(ConfigError, match=f"export {name}=<your REST API key>"):
        secrets.api_key("users", name, env={})


def test_diff_is_fields_by_default_and_off_or_fields_only(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    path.write_text("kind: attributes\nsource: {table: U}\n")
    assert load_integration(path).diff == "fields"
    path.write_text("kind: attributes\nsource: {table: U}\ndiff: off\n")  # YAML: false
    assert load_integration(path).diff == "off"
    error = str(_refused(tmp_path, "kind: attributes\nsource: {table: U}\ndiff: yes\n"))
    assert "key 'diff'" in error and "'fields' or 'off'" in error


def test_max_in_flight_takes_up_to_256_and_names_the_key_above(tmp_path: Path) -> None:
    """A distant service needs many requests out at once (README, "A service across a
    network"): 256 is accepted, 257 is a config error naming service.max_in_flight."""
    path = tmp_path / "users.yaml"
    path.write_text(json.dumps({**BASE, "service": {"max_in_flight": 256}}))
    assert load_integration(path).service.max_in_flight == 256
    error = _refused(tmp_path, json.dumps({**BASE, "service": {"max_in_flight": 257}}))
    assert "max_in_flight" in str(error)
