"""Hot-path statements written once as SQL text: no per-call construction or compilation.

Each statement is built at import, so SQLAlchemy caches its compiled form. JSONB parameters are
typed; results come back decoded by the driver's codecs (jsonb as Python objects, uuid as str).
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.dialects import postgresql as pg

JSONB = pg.JSONB(none_as_null=True)  # None means SQL NULL, never JSON null


def statement(text: str, *, json_params: Iterable[str] = ()) -> sa.TextClause:
    """A reusable text statement with JSONB-typed parameters (ids come back as str: engine.py)."""
    clause = sa.text(text)
    params = [sa.bindparam(name, type_=JSONB) for name in json_params]
    if params:
        clause = clause.bindparams(*params)
    return clause


def jsonb_object(model: type[BaseModel], **columns: str) -> str:
    """`jsonb_build_object(...)` for a wire model, its keys taken from the model's fields.

    `columns` maps each field to a SQL expression; every field the model always writes must be
    given and no other key, so an event built in SQL has exactly the shape the model parses
    (checked at import, where the statement is built).
    """
    fields = model.model_fields
    always = {name for name, f in fields.items() if f.exclude_if is None and not f.exclude}
    missing, unknown = always - set(columns), set(columns) - set(fields)
    if missing or unknown:
        raise TypeError(f"{model.__name__}: missing {sorted(missing)}, unknown {sorted(unknown)}")
    pairs = ", ".join(f"'{name}', {expr}" for name, expr in columns.items())
    return f"jsonb_build_object({pairs})"
