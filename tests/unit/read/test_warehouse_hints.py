"""The fix named for each warehouse's common failures (pure: the drivers' own first lines, as
they word them), and none where nothing is known: the caller's general advice stands."""

from __future__ import annotations

import pytest

from engage_sync.read.warehouse_hints import hint, read_fix

CASES = [
    ("snowflake", "250001 (08001): Failed to connect to DB: xy12345.snowflakecomputing.com:443. "
     "Incorrect username or password was specified.", "key pair in warehouse.connect_args"),
    ("snowflake", "250001 (08001): JWT token is invalid.", "RSA_PUBLIC_KEY"),
    ("snowflake", "000606 (57P03): No active warehouse selected in the current session.",
     "?warehouse=NAME"),
    ("snowflake", "002003 (02000): SQL compilation error: Role 'SYNC' does not exist or not "
     "authorized.", "?role="),
    ("snowflake", "250003: Failed to get the response. Hanging? method: post, url: https://"
     "bad-account.snowflakecomputing.com:443/session/v1/login-request", None),
    ("bigquery", "404 Not found: Dataset my-project:analytics was not found in location US",
     "?location="),
    ("bigquery", "Your default credentials were not found. Could not automatically determine "
     "credentials.", "?credentials_path="),
    ("bigquery", "403 Access Denied: Table my-project:analytics.users: User does not have "
     "permission to query table", "Data Viewer"),
    ("databricks", "Error during request to server: Invalid access token.", "the token"),
    ("redshift", "FATAL: password authentication failed for user \"sync\"", "IAM"),
    ("postgresql", "connection failed: FATAL:  password authentication failed for user \"x\"",
     "connect_args.password"),
    ("postgresql", "connection to server at \"127.0.0.1\", port 1 failed: Connection refused",
     "host and port"),
    ("duckdb", "Catalog Error: Table with name users_sync does not exist!", None),
    ("duckdb", "Out of Memory Error: failed to pin block of size 256.0 KiB (121.8 MiB/122.0 "
     "MiB used)", "?memory_limit=1GB"),
    ("duckdb", "after waiting 300 s: IO Error: Could not set lock on file \"/data/w.duckdb\": "
     "Conflicting lock is held in /usr/bin/python3.11 (PID 4242).",
     "warehouse.lock_wait_seconds"),
]


@pytest.mark.parametrize(("dialect", "said", "named"), CASES)
def test_the_fix_is_named(dialect: str, said: str, named: str | None) -> None:
    fix = hint(dialect, said)
    if named is None:
        assert fix is None
    else:
        assert fix is not None and named in fix


def test_a_hint_never_repeats_a_value_of_the_error() -> None:
    said = "Incorrect username or password was specified for user secret-user-7"
    fix = hint("snowflake", said)
    assert fix is not None and "secret-user-7" not in fix


OUT_OF_MEMORY = ("Out of Memory Error: failed to pin block of size 256.0 KiB (121.8 MiB/122.0 "
                 "MiB used)")


def test_a_query_read_whole_says_it_is_never_sliced() -> None:
    assert read_fix("duckdb", OUT_OF_MEMORY) == hint("duckdb", OUT_OF_MEMORY)
    query = read_fix("duckdb", OUT_OF_MEMORY, whole=True)
    assert query is not None and query.startswith(hint("duckdb", OUT_OF_MEMORY) or "-")
    assert "a SQL query source is sorted whole" in query
    # another failure of a whole read, or another warehouse: the hint alone
    said = "IO Error: Could not set lock on file \"/w.duckdb\""
    assert read_fix("duckdb", said, whole=True) == hint("duckdb", said)
    assert read_fix("postgresql", "out of memory", whole=True) is None
