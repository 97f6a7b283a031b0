"""Structured logging: quiet as a library, JSON or console when an entry point configures it.

Burrow logs with structlog under the `burrow` logger names (`burrow.worker`, `burrow.store`, ...).
Imported as a library, it routes those events through the standard `logging` module
(`install_library_default`, run when `burrow` is imported), so the host application decides
what is shown: by the standard level rules nothing below WARNING is emitted, and nothing is ever
written to stdout. `logging.getLogger("burrow").setLevel(logging.DEBUG)` and a handler show
everything. The CLI entry points call `configure_logging`, which renders to stderr instead.
"""

from __future__ import annotations

import logging
import sys

import structlog

_level_gate = structlog.stdlib.filter_by_level
_render_fields = structlog.processors.LogfmtRenderer(bool_as_flag=False)
_OURS = ("structlog", __name__)


class LevelCheckedLogger(structlog.stdlib.BoundLogger):
    """A stdlib bound logger whose debug and info calls skip the processors below the level.

    Debug events sit on hot paths (one per workflow task): below the level they cost a level
    check, not a copy of the context. The shortcut applies only while the processor chain starts
    with `filter_by_level`, which would drop the event anyway, so a chain replaced by the host or
    by `structlog.testing.capture_logs()` still sees every event.
    """

    def _is_dropped(self, level: int) -> bool:
        processors = self._processors
        if not (isinstance(processors, list) and processors and processors[0] is _level_gate):
            return False
        target: logging.Logger = self._logger
        # The test filter_by_level makes (not isEnabledFor, whose cache 3.14 bypasses in flight).
        return target.disabled or level < target.getEffectiveLevel()

    def debug(self, event: str | None = None, *args: object, **kw: object) -> object:
        """Process the event and call `logging.Logger.debug`, unless the level drops it."""
        if self._is_dropped(logging.DEBUG):
            return None
        return super().debug(event, *args, **kw)

    def info(self, event: str | None = None, *args: object, **kw: object) -> object:
        """Process the event and call `logging.Logger.info`, unless the level drops it."""
        if self._is_dropped(logging.INFO):
            return None
        return super().info(event, *args, **kw)


def render_for_logging(
    logger: structlog.typing.WrappedLogger, method_name: str, event_dict: structlog.typing.EventDict
) -> tuple[tuple[str], dict[str, object]]:
    """Last processor: one `event key=value ...` message, exceptions left to `logging`."""
    kwargs = {"exc_info": event_dict.pop("exc_info", None), "stacklevel": _caller_stacklevel()}
    event = str(event_dict.pop("event", ""))
    fields = _render_fields(logger, method_name, event_dict) if event_dict else ""
    return (f"{event} {fields}" if fields else event,), kwargs


def _caller_stacklevel() -> int:
    """The `stacklevel` that makes a record name Burrow's calling line, not structlog's."""
    # Frames: this, render_for_logging, structlog's event processing, then the frame that
    # calls the `logging` method (stdlib counts it as level 1).
    frame = sys._getframe(3)
    level = 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(_OURS):
        frame = frame.f_back
        level += 1
    return level


def _stdlib_logger(*args: object) -> logging.Logger:
    """Logger factory: the named `logging` logger; unlike structlog's, no global logger class."""
    return logging.getLogger(args[0] if args and isinstance(args[0], str) else None)


def install_library_default() -> None:
    """Route Burrow's logs through `logging` unless structlog was configured already.

    Run when `burrow` is imported. An application that configures structlog itself (before or
    after importing `burrow`) keeps its configuration, and Burrow's events follow it. Neither the
    root logger nor any handler is touched: without a logging configuration, Python's own
    last-resort handler prints only warnings and errors, to stderr.
    """
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            _level_gate,
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.PositionalArgumentsFormatter(),
            render_for_logging,
        ],
        wrapper_class=LevelCheckedLogger,
        logger_factory=_stdlib_logger,
        cache_logger_on_first_use=True,
    )


def configure_logging(*, json: bool | None = None, level: str = "INFO") -> None:
    """Configure structlog for an entry point; JSON when stderr is not a terminal by default."""
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
