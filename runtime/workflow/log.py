"""`workflow.logger`: structured logs from workflow code, silent while replaying."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from burrow.workflow import context


class _ReplayAwareLogger:
    """Logs from workflow code, silent while replaying so each line appears once."""

    def __getattr__(self, level: str) -> Callable[..., None]:
        def emit(event: str, **kw: object) -> None:
            instance = context.current()
            if instance.is_replaying:
                return
            log = structlog.get_logger("burrow.workflow")
            getattr(log, level)(
                event,
                workflow_id=instance.run.workflow_id,
                run_id=instance.run.run_id,
                namespace=instance.run.namespace,
                **kw,
            )

        return emit


logger = _ReplayAwareLogger()
