"""The memo and search attribute upserts workflow code makes through the Runtime (issue 30).

Each upsert is a step: new, it is a command the store merges and records (`MemoUpserted`,
`SearchAttributesUpserted`); recorded, replay checks the code upserts the same patch at the same
step. The memo and attributes the code reads are the start's with the code's own upserts applied
in order, so a cached instance and a cold replay see the same values at the same point.
"""

from __future__ import annotations

from collections.abc import Mapping

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol import visibility_values as vv
from burrow.protocol.shapes import JsonDict
from burrow.replay.child_steps import ChildSteps


class VisibilitySteps(ChildSteps):
    """`upsert_memo`, `upsert_search_attributes` and what the code reads back."""

    _memo_now: JsonDict | None = None
    _attributes_now: JsonDict | None = None

    @property
    def memo(self) -> JsonDict:
        """The run's memo as of this point of its code."""
        if self._memo_now is None:
            started = self.started
            self._memo_now = dict(started.memo or {}) if started is not None else {}
        return dict(self._memo_now)

    @property
    def search_attributes(self) -> JsonDict:
        """The run's custom search attributes as of this point of its code."""
        if self._attributes_now is None:
            started = self.started
            held = started.search_attributes if started is not None else None
            self._attributes_now = dict(held or {})
        return dict(self._attributes_now)

    def upsert_memo(self, entries: Mapping[str, object]) -> None:
        """Merge `entries` into the memo (None deletes a key): one step."""
        patch = vv.check_memo(entries, what="memo patch")
        if not patch:
            raise ValueError("upsert_memo() needs at least one entry")
        merged = vv.check_memo(vv.merge_memo(self.memo, patch))
        encoded = self._encode(patch, "memo patch")
        recorded = self._recorded.get(self._next_step)
        seq = self._step(lambda n: cmd.UpsertMemo(seq=n, entries=encoded))
        if isinstance(recorded, ev.MemoUpserted) and codec.decode(recorded.entries) != patch:
            self._nondeterminism(seq, f"memo upsert of {sorted(patch)}", "another memo upsert")
        self._memo_now = merged

    def upsert_search_attributes(self, attributes: Mapping[str, object]) -> None:
        """Set the named attributes (None removes one): one step, typed by the store."""
        if not attributes:
            raise ValueError("upsert_search_attributes() needs at least one attribute")
        patch = vv.plain_values(attributes)
        recorded = self._recorded.get(self._next_step)
        seq = self._step(
            lambda n: cmd.UpsertSearchAttributes.model_validate({"seq": n, "attributes": patch})
        )
        if isinstance(recorded, ev.SearchAttributesUpserted) and recorded.attributes != patch:
            self._nondeterminism(
                seq, f"search attributes upsert of {sorted(patch)}", "another upsert"
            )
        now = self.search_attributes
        now.update(patch)
        self._attributes_now = {k: v for k, v in now.items() if v is not None}
