"""The operator web UI of `burrow server`, at /ui (issue 31).

Server-rendered: Jinja2 templates and a vendored htmx ship in the package, so the UI works
offline and needs no front-end toolchain. Pages read the store in-process, as the API does;
actions go through the same store calls as the control plane.
"""

from __future__ import annotations

from fastapi import APIRouter

from burrow.ui.pages import install


def routers() -> list[APIRouter]:
    """The page routers, in the order they are matched."""
    from burrow.ui import (
        fleet_page,
        live,
        metrics_page,
        run_actions,
        run_page,
        schedule_pages,
        workflow_list,
    )

    return [
        workflow_list.router,
        live.router,
        run_page.router,
        run_actions.router,
        fleet_page.router,
        schedule_pages.router,
        metrics_page.router,
    ]


__all__ = ["install", "routers"]
