"""The key check and the one recorder of failures before a run's loop, without I/O: only a 401
refuses the key, one attempt, the key never in a message; a recorded failure is `config_error`
for a ConfigError, else `error`, on one line naming the integration, and a bug's own text is
never recorded."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engage_sync.adapters.failures import recorded
from engage_sync.config.service import Service
from engage_sync.deliver.key_check import CHECK_PATH, check_key
from engage_sync.errors import ConfigError, FatalDeliveryError, RunInProgress, SourceError

KEY = "k-7731-secret"


def _answering(status: int | None, seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if status is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(status, json={"message": "x"})

    return httpx.MockTransport(handle)


def test_a_401_refuses_the_key_naming_its_variable_not_its_value() -> None:
    seen: list[httpx.Request] = []
    with pytest.raises(FatalDeliveryError) as refused:
        check_key(_answering(401, seen), Service(base_url="http://127.0.0.1:1/api/"), KEY, "crm")
    text = str(refused.value)
    assert text.startswith("integration crm: the service refused the API key")
    assert "ENGAGE_API_KEY" in text and KEY not in text
    (request,) = seen
    assert (request.method, str(request.url)) == ("GET", f"http://127.0.0.1:1/api{CHECK_PATH}")
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_a_key_in_a_secret_block_is_named_by_its_block() -> None:
    with pytest.raises(FatalDeliveryError, match="Secret block 'crm-key'"):
        check_key(_answering(401, []), Service(api_key_block="crm-key"), KEY, "crm")


@pytest.mark.parametrize("status", [200, 403, 429, 500, 503, None])
def test_anything_but_a_401_lets_the_run_go_on_after_one_attempt(status: int | None) -> None:
    seen: list[httpx.Request] = []
    check_key(_answering(status, seen), Service(), KEY, "crm")
    assert len(seen) == 1


class _Runs:
    """The two calls the recorder makes of a state store."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, str, str, str]] = []
        self._opened: dict[str, tuple[str, str]] = {}

    def open_run(self, name: str, mode: str, *_: Any, **kw: Any) -> str:
        run_id = f"r{len(self._opened)}"
        self._opened[run_id] = (name, mode)
        return run_id

    def finish_run(self, run_id: str, status: str, message: str) -> None:
        self.finished.append((*self._opened[run_id], status, message))


@pytest.mark.parametrize(("exc", "status"), [
    (ConfigError("integration crm: bad\nkey", key="source"), "config_error"),
    (SourceError("cannot read the source"), "error"),
])
def test_a_failure_is_recorded_once_on_one_line(exc: Exception, status: str) -> None:
    runs = _Runs()
    store: Any = runs  # stands in for a StateStore
    with pytest.raises(type(exc)), recorded(store, "crm", "backfill"):
        raise exc
    ((name, mode, got, message),) = runs.finished
    assert (name, mode, got) == ("crm", "backfill", status)
    assert message.startswith(("integration crm:", "key source: integration crm:"))
    assert "\n" not in message


def test_a_bug_is_recorded_by_its_type_only() -> None:
    runs = _Runs()
    store: Any = runs  # stands in for a StateStore
    with pytest.raises(KeyError), recorded(store, "crm"):
        raise KeyError(f"postgresql://u:{KEY}@h/db")
    ((*_, status, message),) = runs.finished
    assert status == "error" and "KeyError" in message and KEY not in message


def test_another_process_run_and_a_narrower_kind_record_nothing() -> None:
    runs = _Runs()
    store: Any = runs  # stands in for a StateStore
    with pytest.raises(RunInProgress), recorded(store, "crm"):
        raise RunInProgress("held")
    with pytest.raises(SourceError), recorded(store, "crm", only=ConfigError):
        raise SourceError("not a config error")
    assert runs.finished == []
