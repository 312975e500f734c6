"""Rows that share a whole position (cursor value and every key value), told apart.

Two rows tie when their keys repeat at one `UPDATED_AT` (a duplicated key, or NULL keys, which
`null_keys` rejects). A row error is keyed by its position, so tied rejects would collapse into
one and the run's counts would no longer add up to the rows read. `Ties` numbers the rows of
the source order: the n-th row (from 0) of a run of equal positions gets ordinal n, and its
error position is the encoded cursor followed by `#n` for n > 0
(`state.row_errors.reject_position`).

Invariant: ordinals are counted across batch boundaries, and depend only on the rows read
from the window's start, so a row read again (a resume that rereads the same stretch) gets the
same position and recording its error twice stays a no-op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engage_sync.cursor.progress import Cursor


class Ties:
    """Ordinals of rows among the rows before them with the same position."""

    def __init__(self) -> None:
        self.last: Cursor | None = None
        self.run = 0  # ordinal of the last row seen

    def number(self, cursors: Sequence[Cursor]) -> list[int]:
        """The ordinal of each row of the next batch (all its cursors)."""
        out: list[int] = []
        for c in cursors:
            if self.last is not None and c == self.last:
                self.run += 1
            else:
                self.last, self.run = c, 0
            out.append(self.run)
        return out

    def pass_over(self, cursor_at: Callable[[int], Cursor], n: int) -> None:
        """The next batch of `n` rows, when no ordinal of it is needed: only its tail of
        equal positions is looked at (usually one row)."""
        if n == 0:
            return
        last = cursor_at(n - 1)
        j = n - 1
        while j > 0 and cursor_at(j - 1) == last:
            j -= 1
        if j == 0 and self.last is not None and last == self.last:
            self.run += n
        else:
            self.last, self.run = last, n - 1 - j
