"""Hot-path statements written once as SQL text: no per-call construction or compilation.

Each statement is built at import, so SQLAlchemy caches its compiled form; JSONB parameters and
result columns are typed so values travel as Python objects.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

JSONB = pg.JSONB(none_as_null=True)  # None means SQL NULL, never JSON null
TEXT_UUID = pg.UUID(as_uuid=False)
# Ids travel as str everywhere else in the store (Core columns use UUID(as_uuid=False)).
UUID_COLUMNS = (
    "run_id",
    "task_id",
    "lease_token",
    "activity_attempt_id",
    "continued_from_run_id",
    "continued_to_run_id",
    "workflow_task_id",
)


def statement(text: str, *, json_params: Iterable[str] = ()) -> sa.TextClause:
    """A reusable text statement: JSONB-typed parameters, ids returned as str."""
    clause = sa.text(text)
    params = [sa.bindparam(name, type_=JSONB) for name in json_params]
    if params:
        clause = clause.bindparams(*params)
    return clause.columns(**dict.fromkeys(UUID_COLUMNS, TEXT_UUID))  # type: ignore[return-value]
