"""Rejected database credentials are a configuration error, not an outage to retry."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from burrow.errors import ConfigurationError
from burrow.store import Store
from burrow.store import errors as store_errors


async def test_rejected_credentials_raise_a_non_retriable_configuration_error(
    database_url: str,
) -> None:
    url = make_url(database_url).set(username="burrow_no_such_role", password="wrong")
    store = Store.connect(url.render_as_string(hide_password=False), pool_size=1)
    try:
        with pytest.raises(
            store_errors.CredentialsRejected, match="refused the credentials"
        ) as caught:
            await store.get_run(namespace="default", workflow_id="any")
    finally:
        await store.close()
    assert isinstance(caught.value, ConfigurationError)
    assert isinstance(caught.value, store_errors.StoreError)
    assert not isinstance(caught.value, store_errors.StoreUnavailable)
    assert "BURROW_DATABASE_URL" in str(caught.value)
