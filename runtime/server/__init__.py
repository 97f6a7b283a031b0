"""`burrow server`: the Durable Workflow v2 worker protocol and control plane over HTTP.

External workers and clients (the `durable-workflow` Python SDK among them) run against the
same store and broker as Burrow's own workers. PROTOCOL.md is the contract.
"""

from __future__ import annotations

from burrow.server.asgi_app import create_app
from burrow.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
