"""A run's field-level diff: each extracted batch's attribute items reduced to what changed.

Invariants:
- one record lookup per batch (`StateStore.field_digests`, chunked), made before any item of
  the batch is diffed, so a batch is diffed against one consistent view;
- the lookup reads the folded record only, so it is made when no user it finds has deltas
  settled by this run and still in the record's log: users whose items settled are kept in a
  Bloom filter (`KeyFilter`), and when one the lookup found may be among them the log is
  folded first (`open` folds what an earlier run left; `close` folds what this run logged).
  A user the lookup does not find may have logged fresh deltas: it is sent whole again, and
  its new fresh delta, a whole record, supersedes them. So a run that opened on an empty
  record (`blank`: a first run, or one after `forget`), and a full resync, look nothing up
  and keep neither the pending map nor the filter: every item is sent whole, and folded at
  the run's end (so a run's memory never grows with its rows);
- an item is diffed against what the service will hold once everything already handed to the
  send loop is acknowledged: the stored record, overridden by the expectation of the items of
  this run not yet settled for the same user (`pending`). So a value changed by one row and
  changed back by a later row is sent both times;
- `pending` holds only users with items read and not yet settled (`release`): it is bounded by
  the send loop's window and one batch, not by the rows of a run;
- the record itself is written only at settlement (`Item.fields`, `state.settle`), for the
  objects the service acknowledged; an item that failed records nothing, one in doubt only
  that its attributes are unknown, and a later row of the same run may have been reduced
  against it: such fields are sent again the next time the row is read (its `UPDATED_AT`
  moves, a lookback, a full resync);
- a run on an empty record may hand the digests to a helper process once it has diffed
  `helper_after` items itself (`field_helper`): from then on its items carry no digests and
  the objects the service acknowledged go to the helper after each settle (`acked`); at
  `close` the helper writes its records over the run's (on a SQLite file its pass takes the
  run's fresh deltas out of the log: `FieldHelper.takes_log`), and the run folds its log;
- an object in doubt leaves what it carried unknown: the run logs each of its attributes
  unknown (merged: the user's others stay); the helper forgets what it kept of the user so
  far (no record, unless a later object of the user is acknowledged: sent whole next time);
- a user is recorded by the log or by the helper, never both: once the helper runs, an item
  of a user the run digested before it started (`digested`: the users of the batches read
  until the helper started, at most `helper_after` and one batch) is
  still digested here and logged at its settle. So a run that ends without the helper's write
  (killed, or the helper failed) leaves no user's record older than the last object the
  service acknowledged to it: the log has every acknowledged object of its users, and the
  helper's users have no record (sent whole next time).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

import orjson

from engage_sync.diff.field_diff import diff, diff_stored, identifier_of, whole_encoded
from engage_sync.diff.helper import FieldHelper, shareable_url, sqlite_file
from engage_sync.diff.logged_users import KeyFilter
from engage_sync.items import UNCHANGED, Item, RowOutcome, json_blob
from engage_sync.state.field_codec import Digests, decode, encode, merged, user_key
from engage_sync.state.fields import FRESH, MERGE
from engage_sync.state.store import StateStore

log = logging.getLogger(__name__)


class Differ:
    """Diffs the items of one run's batches and counts what it saved.

    refresh: a full resync sends every attribute and records them all.
    start_helper, helper_after: on an empty record, start a helper process after this many
    items (None: never)."""

    def __init__(self, integration: str, state: StateStore, refresh: bool = False,
                 start_helper: Callable[[], FieldHelper | None] | None = None,
                 helper_after: int | None = None) -> None:
        self.integration, self.state, self.refresh = integration, state, refresh
        self.start_helper = start_helper if helper_after is not None else None
        self.helper_after = helper_after or 0
        self.helper: FieldHelper | None = None
        self.ending: FieldHelper | None = None  # the helper `close` finished, until `stop`
        self.whole = 0  # items sent whole on an empty record, digested here
        self.digested: set[str] = set()  # their users, while a helper may start or runs
        self.pending: dict[str, tuple[int, Digests]] = {}  # by user reference
        self.unchanged = 0
        self.saved = 0
        self.logged = KeyFilter()  # users whose items settled since the last fold
        self.blank = False  # the folded record is empty: lookups would find nothing

    # the loop's hooks (`run.stage.Stage`) ------------------------------------------------
    def open(self) -> None:
        """Before the first batch: fold what earlier runs logged (a run killed before its
        `close`), so the lookups see it. A first run (no record yet) looks nothing up: what
        it records stays in the log until a fold. A first run resumed (no folded record, only
        the log of an attempt that never reached `close`) may start a helper: it forgets that
        log and opens on an empty record again, as the attempt's helper users already have
        no record (those users are sent whole the next time they are read); folding it would
        make the run look users up, never start its helper, and a helper user recorded by
        the log whose object then ended in doubt would keep its older record."""
        if self.start_helper is not None and not self.refresh \
                and not self.state.has_field_record(self.integration):
            self.state.forget_fields(self.integration)
        self.state.fold_fields(self.integration)
        self.blank = not self.state.has_field_record(self.integration)

    def close(self) -> None:
        """After the run's last settlement: fold what it logged and let its helper, if any,
        write what it kept (raises SyncError if the helper failed). Their users are apart, so
        the helper may take the run's fresh deltas into its sorted pass (`takes_log`), and the
        fold after it applies what is left (an object in doubt's unknowns). The helper's write
        is most of a first run's end and grows with its users: the wait is said when it starts
        and its time when it ends."""
        helper, self.helper = self.helper, None
        if helper is None or not helper.takes_log:
            self.state.fold_fields(self.integration)
        if helper is not None:
            log.info("integration %s: every request answered; the run ends once the helper "
                     "has written the field record of the %s objects it was handed",
                     self.integration, f"{helper.handed:,}")
            started = time.monotonic()
            self.ending = helper  # `stop` waits for its copy of the WAL
            helper.finish()
            log.info("integration %s: the helper wrote the field record of this first run "
                     "in %.2f s", self.integration, time.monotonic() - started)
            if helper.takes_log:
                self.state.fold_fields(self.integration)
        self.logged.clear()
        self.blank = False

    def stop(self) -> None:
        """The run ended without `close`: stop the helper, if any (it records nothing); or
        after it: wait for the helper that wrote at `close` to end (it copies the state
        file's WAL meanwhile, while the run closes its row)."""
        helper, ending = self.helper, self.ending
        self.helper = self.ending = None
        try:
            if helper is not None:
                helper.stop()
        finally:  # interrupted while it stops the one: the other is still stopped
            if ending is not None:
                ending.stop()

    def batch(self, outcomes: list[RowOutcome]) -> None:
        self.apply(outcomes)

    def skipped(self, items: Sequence[Item]) -> None:
        """Items an earlier attempt settled: never pending, as they are not sent again."""
        self.release(items)

    def settled(self, acked: Sequence[Item], doubted: Sequence[Item],
                settled: Sequence[Item]) -> None:
        """After each settle transaction: the helper gets the acknowledged objects, then those
        in doubt (after: a user with both is unknown); the settled items are no longer
        pending."""
        self.acked(acked)
        self.doubted(doubted)
        self.release(settled)

    # ----------------------------------------------------------------------------------------
    def acked(self, items: Iterable[Item]) -> None:
        """Objects the service acknowledged, just settled: the helper digests and keeps those
        this run did not digest itself."""
        if self.helper is not None:
            fresh = [i for i in items if not i.fields]
            self.helper.hand([i.user for i in fresh], [i.blob for i in fresh])

    def doubted(self, items: Iterable[Item]) -> None:
        """Objects whose requests ended in doubt, just settled: the helper forgets what it
        kept so far of the users of those the run did not digest, so that (unless a later
        object of theirs is acknowledged) they have no record and are sent whole, NULLs too,
        the next time they are read. (The run marks its own users' objects' attributes
        unknown in the log instead, `state.fields.unknown_fields`.)"""
        if self.helper is not None:
            self.helper.forget([user_key(i.user) for i in items if not i.fields])

    def _stored(self, keys: list[bytes]) -> dict[bytes, bytes]:
        """The record of these users (see the module's invariants)."""
        found = self.state.field_digests(self.integration, keys)
        if found and any(self.logged.may_hold(list(found))):
            self.close()
            found = self.state.field_digests(self.integration, keys)
        return found

    def apply(self, outcomes: list[RowOutcome]) -> None:
        """Rewrite one batch's items in place: an unchanged row becomes UNCHANGED (nothing to
        send), a changed one carries only its changed attributes; each keeps the digests to
        record."""
        if self.refresh or self.blank:
            self._apply_whole(outcomes)
            return
        at = [k for k, o in enumerate(outcomes) if isinstance(o, Item)]
        users = [outcomes[k].user for k in at]  # type: ignore[union-attr]
        keys = [user_key(u) for u in users]
        pending = self.pending
        stored = self._stored(
            [key for key, u in zip(keys, users, strict=True) if u not in pending])
        for k, user, key in zip(at, users, keys, strict=True):
            item = outcomes[k]
            assert isinstance(item, Item)
            held = pending.get(user)
            blob = stored.get(key) if stored and held is None else None
            obj = orjson.loads(item.blob)
            if blob is not None:  # the stored record: compared as stored, decoded if changed
                change = diff_stored(obj, identifier_of(user), blob)
                last: Digests | None = decode(blob) if change.delta else None
            else:
                last = held[1] if held else None
                change = diff(obj, identifier_of(user), last)
            self.saved += change.saved
            if change.obj is None:
                self.unchanged += 1
                outcomes[k] = UNCHANGED
                continue
            sent = item.blob if change.whole else json_blob(change.obj)
            fresh = FRESH if last is None else MERGE
            outcomes[k] = Item(item.seq, item.key, user, item.array, sent, item.group,
                               change.sent, fresh + encode(change.delta))
            # a whole object's delta is the user's whole record: kept as it is, not copied
            pending[user] = ((held[0] if held else 0) + 1,
                             change.delta if last is None else merged(last, change.delta))

    def _apply_whole(self, outcomes: list[RowOutcome]) -> None:
        """A full resync, or a run that opened on an empty record: every item is sent whole,
        with no lookup and no pending map. On an empty record each is logged fresh (a user's
        later item is a whole record too: the last one acknowledged wins at the fold); a
        resync's are merged on top of the record, in settle order, at the fold."""
        if not self.refresh and self.start_helper is not None and self.helper is None \
                and self.whole >= self.helper_after:
            self.helper = self.start_helper()
            if self.helper is None:  # the state database cannot be shared: never
                self.start_helper = None
                self.digested.clear()
        digested = self.digested
        if self.helper is None:
            at = [k for k, o in enumerate(outcomes) if isinstance(o, Item)]
        else:  # the others are sent as packed, digested by the helper once acknowledged
            at = [k for k, o in enumerate(outcomes) if isinstance(o, Item) and o.user in digested]
        keep = self.start_helper is not None and not self.refresh and self.helper is None
        tag = MERGE if self.refresh else FRESH
        for k in at:
            item = outcomes[k]
            assert isinstance(item, Item)
            self.whole += 1  # its points: every attribute, as packed
            if keep:
                digested.add(item.user)
            outcomes[k] = Item(item.seq, item.key, item.user, item.array, item.blob,
                               item.group, item.points, tag + whole_encoded(item.user, item.blob))

    def release(self, items: Iterable[Item]) -> None:
        """These items settled (acknowledged, failed or in doubt): no longer pending, and
        their users' acknowledged fields (if any) are in the record's log. A run on an empty
        record, or a full resync, keeps neither: it looks nothing up."""
        if self.blank or self.refresh:
            return
        self.logged.add([user_key(i.user) for i in items if i.fields])
        if self.logged.full:
            self.close()
        for item in items:
            held = self.pending.get(item.user)
            if held is None:
                continue
            if held[0] <= 1:
                del self.pending[item.user]
            else:
                self.pending[item.user] = (held[0] - 1, held[1])

    def take_counts(self) -> tuple[int, int]:
        """(rows unchanged, data points saved) since the last call."""
        counts = (self.unchanged, self.saved)
        self.unchanged = self.saved = 0
        return counts


def diff_stage(integration: str, state: StateStore, refresh: bool,
               helper_after: int | None) -> Differ:
    """The field diff as a stage of one run. `refresh`: a full resync or a backfill sends
    whole what it reads and refreshes the record; `helper_after`: items a first run digests
    before a helper process takes over (None: never), used only when the state database can
    be shared with another process."""
    url, file = shareable_url(state.engine), sqlite_file(state.engine)

    def start_helper() -> FieldHelper | None:
        if url is None:
            return None
        log.info("integration %s: a helper process records the fields of this first diffed "
                 "run", integration)
        return FieldHelper(integration, url, file)

    return Differ(integration, state, refresh=refresh, start_helper=start_helper,
                  helper_after=helper_after)
