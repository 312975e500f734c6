"""The fix for a warehouse's common connection and access failures, in one line. Pure.

A driver's error says what went wrong in its own words; this names the key of the integration
file to change. Patterns are matched on the driver's first line, case-insensitively; the
hint never repeats a value of the error (it may quote a host or a user, never shown twice).
"""

from __future__ import annotations

import re

_OUT_OF_MEMORY = r"out of memory"  # DuckDB's own words, before the first batch or after
_HINTS: tuple[tuple[str, str, str], ...] = (
    # (dialect, pattern of the driver's message, the fix)
    ("snowflake", r"incorrect username or password",
     "check the user in warehouse.url and the password or key pair in warehouse.connect_args"),
    ("snowflake", r"jwt token is invalid|public key fingerprint",
     "the key pair is not the user's: register its public key (ALTER USER … SET "
     "RSA_PUBLIC_KEY) or point warehouse.connect_args.private_key_file at the right key"),
    ("snowflake", r"no active warehouse",
     "name a warehouse: ?warehouse=NAME on warehouse.url, or give the user a default one"),
    ("snowflake", r"role .* does not exist|not authorized",
     "check ?role= on warehouse.url and that the role is granted to the user"),
    ("snowflake", r"account .* (?:not found|does not exist)|failed to connect to db|"
     r"name or service not known",
     "check the account in warehouse.url (org-account) and, behind private link, "
     "warehouse.connect_args.host"),
    ("bigquery", r"was not found in location|location",
     "the dataset is in another location: set ?location= on warehouse.url to the dataset's"),
    ("bigquery", r"could not automatically determine credentials|credentials",
     "give a service-account file (?credentials_path= on warehouse.url) or set up "
     "application-default credentials"),
    ("bigquery", r"access denied|permission",
     "grant the service account BigQuery Data Viewer on the dataset and Job User on the "
     "project"),
    ("databricks", r"invalid access token|401|403",
     "check the token in warehouse.url (databricks://token:${DATABRICKS_TOKEN}@host)"),
    ("databricks", r"http_path|404",
     "check warehouse.connect_args.http_path (the SQL warehouse's HTTP path)"),
    ("redshift", r"password authentication failed|authentication",
     "check the user and password in warehouse.url, or use IAM (warehouse.connect_args: "
     "iam, db_user, cluster_identifier, region)"),
    ("postgresql", r"password authentication failed",
     "check the user and password in warehouse.url (or warehouse.connect_args.password)"),
    ("duckdb", _OUT_OF_MEMORY,
     "give DuckDB more memory: ?memory_limit=1GB (or more) on warehouse.url (engage-sync "
     "sets 128MB otherwise)"),
    ("duckdb", r"could not set lock on file",
     "another process has the DuckDB file open (DuckDB lets one process write it): wait "
     "longer for it (warehouse.lock_wait_seconds) or run the file's integrations one at a "
     "time"),
    ("*", r"connection refused|timed out|could not connect|name or service not known",
     "check the host and port in warehouse.url (or warehouse.connect_args) and that the "
     "warehouse is up"),
)


def read_fix(dialect: str, message: str, whole: bool = False) -> str | None:
    """`hint`, and for a window read in one query (`SourceSpec.read_whole`: a SQL query
    source) that DuckDB ran out of memory sorting, that it is never read in slices."""
    fix = hint(dialect, message)
    if not whole or dialect != "duckdb" or not re.search(_OUT_OF_MEMORY, message, re.I):
        return fix
    why = "a SQL query source is sorted whole in one query (it is never read in slices)"
    return f"{fix}; {why}" if fix else why


def hint(dialect: str, message: str) -> str | None:
    """The fix for a failure of a `dialect` warehouse whose driver said `message`, or None."""
    for where, pattern, fix in _HINTS:
        if where in (dialect, "*") and re.search(pattern, message, re.IGNORECASE):
            return fix
    return None
