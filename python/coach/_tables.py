"""The embedding tables' part of a script's connection to Coach (docs/wire.md "Rows of a
script's tables"): the ids a step looks up (`lookup` / `ids`), the rows region a step's rows and
their gradients travel in, and an evaluation's `pull`. A part of ``coach.Job``."""
import mmap
import os

import numpy as np

from . import CoachError, _is_int, _number, _one_line


class _Tables:
    """Job's methods for its tables (``self.tables``, ``self._lookups``, ``self._lookup``,
    ``self._rows_mm``, ``self._evaluating``, set by Job)."""

    def check_ids(self, t, ids, what):
        """ids (any integer array-like) of table t as the ascending unique int64 array Coach
        takes; CoachError (one line) for an id outside [0, rows)."""
        name, rows = self.tables[t][0], self.tables[t][1]
        ids = np.asarray(ids)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise CoachError(f"{what}: the ids of table {name!r} are {ids.dtype}, not integers")
        ids = np.unique(ids.astype(np.int64, copy=False).ravel())
        if ids.size and (ids[0] < 0 or ids[-1] >= rows):
            bad = ids[0] if ids[0] < 0 else ids[-1]
            raise CoachError(f"{what}: table {name!r} has no id {int(bad)} (its ids lie in "
                             f"[0, {rows}))")
        return ids

    def _answer_lookup(self, msg):
        step = self._field(msg, "step", int)
        indices = self._indices(msg, f"step {step}'s lookup")
        if self._lookups is None:
            raise self._junk(f"lookup (step {step}) came to a script without tables")
        got = self._call(lambda job: job._lookups(indices))
        if not isinstance(got, (list, tuple)) or len(got) != len(self.tables):
            raise self._error(f"step {step}: lookups gave {got!r:.60}; give one id array per "
                              f"table ({len(self.tables)})")
        ids = self._call(lambda job: [job.check_ids(t, got[t], f"step {step}")
                                      for t in range(len(job.tables))])
        self._lookup = (step, ids)
        line = {"op": "ids", "step": step, "ids": [a.tolist() for a in ids]}
        try:
            self._send(line)
        except CoachError as e:
            raise self._error(f"step {step}'s ids: {e}; a step may look up about 50 000 rows "
                              "(the JSON line's limit): use a smaller batch") from None

    def _map_rows(self, msg):
        """Maps the rows region a message names anew (rows_shm); returns its bytes."""
        size = self._field(msg, "rows_bytes", int)
        path = msg.get("rows_shm")
        if path is not None:
            if not isinstance(path, str):
                raise self._junk(f"{msg['op']} field 'rows_shm' is {path!r:.40}")
            try:
                fd = os.open(path, os.O_RDWR)
            except OSError as e:
                raise self._error(f"cannot open Coach's rows region {path}: {e.strerror}") \
                    from None
            try:
                self._rows_mm = mmap.mmap(fd, size)  # the old one goes with its last view
            except (OSError, ValueError) as e:
                raise self._error(f"cannot map Coach's rows region {path}: {e}") from None
            finally:
                os.close(fd)
        if self._rows_mm is None or len(self._rows_mm) < size:
            raise self._junk(f"{msg['op']} names a rows region of {size} bytes; none that "
                             "large is mapped")
        return size

    def _row_views(self, counts, offset, size):
        out, at = [], offset
        for (_, _, dim, _), n in zip(self.tables, counts):
            if at + 4 * n * dim > size:
                raise self._junk(f"rows of {n} x {dim} floats beyond the region's {size} bytes")
            out.append(np.frombuffer(self._rows_mm, np.float32, n * dim, at).reshape(n, dim))
            at += 4 * n * dim
        return out

    def _counts(self, msg, what):
        counts = self._field(msg, "rows", list)
        if len(counts) != len(self.tables) or not all(_is_int(n) and n >= 0 for n in counts):
            raise self._junk(f"{what}'s rows are {counts!r:.60}")
        return counts

    def _step_rows(self, msg, out):
        step = out.step
        if self._lookup is None or self._lookup[0] != step:
            raise self._junk(f"step {step} came before its lookup")
        ids = self._lookup[1]
        counts = self._counts(msg, f"step {step}")
        if [len(a) for a in ids] != counts:
            raise self._junk(f"step {step} brings {counts} rows; its lookup gave "
                             f"{[len(a) for a in ids]}")
        size = self._map_rows(msg)
        grads_at = self._field(msg, "rows_grads_offset", int)
        out.row_ids = ids
        out.rows = self._row_views(counts, 0, size)
        out.row_grads = self._row_views(counts, grads_at, size)

    def pull(self, ids):
        """During an evaluation: the rows `ids` (one id array per table; each made ascending and
        unique) of the epoch's tables, as [float32 array (rows x dim)] (copies), with the ids
        they are for: ([ids], [values])."""
        if self._state != "running" or not self._evaluating:
            raise CoachError("rows can be pulled only while Coach evaluates (evaluate(model))")
        if len(ids) != len(self.tables):
            raise CoachError(f"pull takes one id array per table ({len(self.tables)})")
        ids = [self.check_ids(t, a, "pull") for t, a in enumerate(ids)]
        self._send({"op": "pull", "ids": [a.tolist() for a in ids]})
        msg = self._receive()
        if msg is None:
            self._state = "closed"
            raise CoachError("Coach closed the control channel during a pull")
        if msg["op"] == "error":
            self._state = "closed"
            raise CoachError(f"Coach failed: {_one_line(msg.get('message'))}")
        if msg["op"] != "rows":
            raise self._junk(f"{msg['op']!r:.40} where the pulled rows were due")
        counts = self._counts(msg, "pull")
        if counts != [len(a) for a in ids]:
            raise self._junk(f"{counts} rows where {[len(a) for a in ids]} were pulled")
        size = self._map_rows(msg)
        return ids, [v.copy() for v in self._row_views(counts, 0, size)]


def _check_tables(tables):
    out, names = [], set()
    for t in tables:
        try:
            name, rows, dim, init_scale = t
        except (TypeError, ValueError):
            raise CoachError(f"table {t!r:.60} is not (name, rows, dim, init_scale)") from None
        if not isinstance(name, str) or not name or name in names:
            raise CoachError(f"table name {name!r:.60} is empty, not a string or repeated")
        if not _is_int(rows) or not 1 <= rows <= 1 << 40:
            raise CoachError(f"table {name!r} has {rows!r:.40} rows: give 1 to 2^40")
        if not _is_int(dim) or not 1 <= dim <= 65536:
            raise CoachError(f"table {name!r} has dim {dim!r:.40}: give 1 to 65536")
        scale = _number(init_scale)
        if scale is None or scale < 0:
            raise CoachError(f"table {name!r} has init_scale {init_scale!r:.40}: give >= 0")
        names.add(name)
        out.append((name, int(rows), int(dim), scale))
    return out
