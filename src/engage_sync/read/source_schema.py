"""The source's schema as the schema guard sees it, and how it changed since the last run.

A schema is a map of names to type texts: each column of the source (as the warehouse spells
it) → its type as the warehouse's SQLAlchemy dialect names it (from the inspector for a table;
from the driver's description for a SQL query), and, for the payload format, each key found in
a sample of the payloads at or after the stored cursor (`payload.KEY`: the rows the next
window starts with) → the JSON types its values took there.

Invariants:
- `describe` reads the source's metadata and at most `SAMPLE_ROWS` payloads (no ORDER BY, so
  a warehouse stops at the first rows it finds), never a window;
- `compare` is pure: a guarded name whose type changed is *retyped* (the run must stop);
  a name that disappeared is *removed*, one that appeared is *added* (reported only: a removed
  mapped column already fails the read, naming it, and a removed payload key sends nothing);
- a character type whose length alone changed is not a change (it sends the same values);
  a payload key whose JSON types overlap the old ones (a NULL, or a number that is sometimes
  a string) is not retyped.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.cursor.progress import Cursor
from engage_sync.errors import SourceError
from engage_sync.read import duckdb_columns
from engage_sync.read.extract import connected, first_line, resolve_columns, source_of
from engage_sync.read.source_spec import SourceSpec

Schema = dict[str, str]
PAYLOAD_PREFIX = "payload."
SAMPLE_ROWS = 200
_CHARACTER = re.compile(r"^(N?VARCHAR|N?CHAR|CHARACTER VARYING|CHARACTER|STRING|TEXT)\b",
                        re.IGNORECASE)


@dataclass
class SchemaChanges:
    retyped: list[tuple[str, str, str]] = field(default_factory=list)  # (name, old, new)
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.retyped or self.removed or self.added)


def compare(old: Schema, new: Schema, guarded: Collection[str]) -> SchemaChanges:
    """What changed from `old` to `new`; only names in `guarded` (case-insensitive: the
    columns the integration reads, and every payload key) can be retyped."""
    watched = {g.lower() for g in guarded}
    changes = SchemaChanges()
    for name, was in old.items():
        now = new.get(name)
        if now is None:
            changes.removed.append(name)
        elif (name.lower() in watched or name.startswith(PAYLOAD_PREFIX)) \
                and _retyped(name, was, now):
            changes.retyped.append((name, was, now))
    changes.added = [name for name in new if name not in old]
    return changes


def kept(was: Schema, now: Schema, guarded: Collection[str]) -> Schema:
    """What to record after a run: `now`, each payload key with every JSON type seen so far
    (a sample cannot show every row, so a key whose rows mix types never flips a run), and
    each guarded column that went missing with its old type (so its return with another type
    is still a change)."""
    watched = {g.lower() for g in guarded}
    out = dict(now)
    for name, types in was.items():
        if name.startswith(PAYLOAD_PREFIX):
            seen = set(types.split("|")) | set(filter(None, now.get(name, "").split("|")))
            out[name] = "|".join(sorted(seen))
        elif name not in now and name.lower() in watched:
            out[name] = types
    return out


def _retyped(name: str, was: str, now: str) -> bool:
    if name.startswith(PAYLOAD_PREFIX):
        return not set(was.split("|")) & set(now.split("|"))
    if _CHARACTER.match(was) and _CHARACTER.match(now):
        return _base(was) != _base(now)
    return was != now


def _base(type_text: str) -> str:
    return type_text.split("(", 1)[0].strip().upper()


def describe(engine: Engine, spec: SourceSpec, payload_column: str | None,
             after: Cursor | None = None) -> Schema:
    """The source's columns and types, and with `payload_column` the JSON types of each key of
    a sample of the payloads at or after the cursor `after`. Raises SourceError when the
    source cannot be read, naming a missing table or column as the read would."""
    with connected(engine, spec) as conn:
        resolve_columns(conn, spec)  # a missing table or column: its own error, with the fix
        try:
            schema = _columns(conn, spec)
            if payload_column is not None:
                schema.update(_payload_keys(conn, spec, payload_column, schema, after))
        except sa.exc.SQLAlchemyError as exc:
            raise SourceError(f"integration {spec.integration}: the schema guard cannot read "
                              f"the source's columns: {first_line(exc)}") from exc
    return schema


def _columns(conn: Connection, spec: SourceSpec) -> Schema:
    if spec.table is not None and conn.dialect.name == "duckdb":
        native = duckdb_columns.columns(conn, spec.table, spec.schema)
        if native is not None:
            return native
    if spec.table is not None:
        try:
            found = sa.inspect(conn).get_columns(spec.table, schema=spec.schema)
            return {c["name"]: _type_text(c["type"]) for c in found}
        except Exception:  # a dialect without inspection: the driver's description
            conn.rollback()
    probe: sa.Select[Any] = sa.select(sa.literal_column("*")).select_from(source_of(spec)).limit(0)
    result = conn.execute(probe)
    description = result.cursor.description if result.cursor is not None else None
    return {d[0]: str(d[1]) for d in description or ()}


def _type_text(type_: Any) -> str:
    """The type as its dialect names it, with the time zone where the name leaves it out
    (PostgreSQL's TIMESTAMP WITH TIME ZONE renders as TIMESTAMP)."""
    try:
        text = str(type_)
    except Exception:  # a dialect type that cannot render without its dialect
        text = type(type_).__name__
    if getattr(type_, "timezone", False) and "ZONE" not in text.upper() \
            and "TZ" not in text.upper():
        text += " WITH TIME ZONE"
    return text


def _payload_keys(conn: Connection, spec: SourceSpec, payload_column: str,
                  columns: Schema, after: Cursor | None) -> Schema:
    """`payload.KEY` → the JSON types ('|'-joined, sorted) its values took in the sample."""
    actual = next((c for c in columns if c.lower() == payload_column.lower()), None)
    cursor = next((c for c in columns if c.lower() == spec.cursor_column.lower()), None)
    if actual is None or cursor is None:
        return {}
    query: sa.Select[Any] = (sa.select(sa.column(actual)).select_from(source_of(spec))
                             .limit(SAMPLE_ROWS))
    if after is not None and after[0] is not None:
        query = query.where(sa.column(cursor) >= after[0])
    types: dict[str, set[str]] = {}
    for (text,) in conn.execute(query):
        try:
            obj = orjson.loads(text) if isinstance(text, str | bytes) else text
        except orjson.JSONDecodeError:
            continue  # the transform rejects it, naming the row
        if isinstance(obj, dict):
            for key, value in obj.items():
                if value is not None:
                    types.setdefault(PAYLOAD_PREFIX + key, set()).add(_json_type(value))
    return {key: "|".join(sorted(found)) for key, found in types.items()}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
