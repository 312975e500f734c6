"""ENGAGE_SYNC_FIELD_HELPER_AFTER (pure): when a first diffed run starts its helper process."""

from __future__ import annotations

import pytest

from engage_sync.diff.helper import AFTER, ENV, helper_after
from engage_sync.errors import ConfigError


@pytest.mark.parametrize(("value", "after"), [
    (None, AFTER), ("", AFTER), (" 0 ", 0), ("5000", 5000), ("off", None), ("OFF", None),
])
def test_the_setting_reads_a_count_or_off(value: str | None, after: int | None) -> None:
    assert helper_after({} if value is None else {ENV: value}) == after


@pytest.mark.parametrize("value", ["-1", "1e4", "never", "20_000"])
def test_a_bad_setting_names_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=f"key {ENV}: must be a whole number"):
        helper_after({ENV: value})
