"""Hot-path statements written once as SQL text: no per-call construction or compilation.

Each statement is built at import, so SQLAlchemy caches its compiled form. JSONB parameters are
typed; results come back decoded by the driver's codecs (jsonb as Python objects, uuid as str).
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

JSONB = pg.JSONB(none_as_null=True)  # None means SQL NULL, never JSON null


def statement(text: str, *, json_params: Iterable[str] = ()) -> sa.TextClause:
    """A reusable text statement with JSONB-typed parameters (ids come back as str: engine.py)."""
    clause = sa.text(text)
    params = [sa.bindparam(name, type_=JSONB) for name in json_params]
    if params:
        clause = clause.bindparams(*params)
    return clause
