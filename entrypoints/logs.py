"""One log set-up for every long-running process (docs/operations.md#logs).

``setup(role)`` is called once at the start of `tp serve` (role ``api``), `tp up` (``up``), the
gateways (``node-gateway``, ``telemetry-gateway``), `tp node run` (``node``), `tp collector`
(``collector``) and a verbose `tp sim` (``sim``). ``TUNEPLANE_LOG_FORMAT`` picks the format:

* ``text`` (the default): one line per record, ``TIME LEVEL ROLE LOGGER: MESSAGE`` then the ids
  known (``request_id=… job_id=… attempt=… member=… node=…``); control characters in the
  message and the ids are escaped (``\\n``), so a line is one record; a traceback follows on
  lines indented by two spaces;
* ``json``: one JSON object per line (python-json-logger): ``ts`` (RFC 3339, UTC), ``level``,
  ``role``, ``logger``, ``msg``, the ids known, and ``exc`` (the traceback) when there is one.

The ids come from ``application.log_context`` (bound at the chokepoints: the API's request
layer, the supervisor per job, the node daemon per member order, the collector per member).
``TUNEPLANE_LOG_LEVEL`` is the lowest level logged. What a process says to its operator rather
than logs (its listen address, an error with its fix) goes through ``say`` and ``report``: as
before in text mode (printed as is), one JSON record in json mode, so that a json-mode process
writes nothing but JSON lines; a bad setting that stops it (``SettingExit``) too, through
``stop_record`` (called by `tp`'s ``run``).
"""

from __future__ import annotations

import logging
import sys
import threading
import types
from datetime import UTC, datetime
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter

from application.log_context import FIELDS, current
from domain.errors import InvalidInput, TunePlaneError
from entrypoints.settings_loader import SettingExit, load, load_one
from entrypoints.settings_sections import LoggingSettings

ROLES = ("api", "up", "node-gateway", "telemetry-gateway", "node", "collector", "sim")
LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": logging.DEBUG,  # uvicorn's TRACE (5) only for uvicorn's own loggers
}
# libraries that say a line per request or per migration at INFO: from WARNING unless debugging
QUIET = (
    "uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi", "alembic", "httpx", "httpcore",
)  # fmt: skip
EXTRAS = ("code", "field", "fix")  # what ``report`` adds to an error's record

log = logging.getLogger("tuneplane")
_json = False  # the format ``setup`` chose (``say``/``report`` follow it)


def _escape_table() -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
    table.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
    table.update({0x2028: "\\u2028", 0x2029: "\\u2029"})  # line breaks to some viewers
    return table


_ESCAPE = _escape_table()


def one_line(text: str) -> str:
    """``text`` with every control character escaped: it cannot start a line of its own."""
    return text.translate(_ESCAPE)


def timestamp(created: float) -> str:
    """RFC 3339 in UTC with milliseconds: ``2026-12-05T16:13:45.123Z``."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


class ContextIds(logging.Filter):
    """Puts the ids bound in ``application.log_context`` on each record (those not known are
    left off); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in current().items():
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        return True


class TextFormatter(logging.Formatter):
    """``TIME LEVEL ROLE LOGGER: MESSAGE key=value…``, one line per record, then the
    traceback indented."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{timestamp(record.created)} {record.levelname} {self.role} {record.name}: "
            f"{one_line(record.getMessage())}"
        )
        for name in (*FIELDS, *EXTRAS):
            value = getattr(record, name, None)
            if value is not None:
                line += f" {name}={one_line(str(value))}"
        more = []
        if record.exc_info:
            more.append(self.formatException(record.exc_info))
        if record.stack_info:
            more.append(self.formatStack(record.stack_info))
        for block in more:
            line += "".join(f"\n  {row}" for row in block.splitlines())
        return line


class JsonLinesFormatter(JsonFormatter):
    """One JSON object per record, with exactly the documented keys (docs/operations.md#logs):
    other attributes a library puts on a record are not written."""

    def __init__(self, role: str) -> None:
        super().__init__(json_ensure_ascii=True)
        self.role = role

    def add_fields(
        self,
        log_data: dict[str, Any],
        record: logging.LogRecord,
        message_dict: dict[str, Any],
    ) -> None:
        log_data["ts"] = timestamp(record.created)
        log_data["level"] = record.levelname
        log_data["role"] = self.role
        log_data["logger"] = record.name
        log_data["msg"] = record.getMessage()
        for name in (*FIELDS, *EXTRAS):
            value = getattr(record, name, None)
            if value is not None:
                log_data[name] = value
        if exc := message_dict.get("exc_info"):  # the traceback, formatted by ``format``
            log_data["exc"] = str(exc)
        if stack := message_dict.get("stack_info"):
            log_data["stack"] = str(stack)


def formatter(role: str, fmt: str) -> logging.Formatter:
    return JsonLinesFormatter(role) if fmt == "json" else TextFormatter(role)


class _Ours(logging.StreamHandler[TextIO]):
    """The handler ``setup`` installs (a second ``setup`` replaces it, and only it)."""


def setup(role: str, *, stream: TextIO | None = None, hooks: bool = True) -> LoggingSettings:
    """Log as ``TUNEPLANE_LOG_FORMAT`` and ``TUNEPLANE_LOG_LEVEL`` say, to ``stream`` (stderr),
    every line naming ``role``. A bad value of either stops the process (SystemExit naming the
    variable and the fix; when TUNEPLANE_LOG_FORMAT=json is good, the json handler is installed
    first, for ``stop_record``). With ``hooks``, an uncaught exception (of the main thread or
    another) is logged too, and Python's warnings go to the log."""
    global _json
    if role not in ROLES:
        raise ValueError(f"unknown process role {role!r}")
    try:
        settings = load(LoggingSettings)
    except SettingExit:
        if _json_wanted():  # a bad TUNEPLANE_LOG_LEVEL (or file): the stop is a json record too
            _install(role, "json", stream)
            _json = True
        raise
    level = _install(role, settings.format, stream, settings.level)
    for name in QUIET:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else max(level, 30))
    _json = settings.format == "json"
    if hooks:
        logging.captureWarnings(True)
        sys.excepthook = _uncaught
        threading.excepthook = _uncaught_in_thread
    return settings


def _install(role: str, fmt: str, stream: TextIO | None, level_name: str = "info") -> int:
    """Our one handler on the root logger (replacing a previous one), at ``level_name``."""
    handler = _Ours(stream or sys.stderr)
    handler.setFormatter(formatter(role, fmt))
    handler.addFilter(ContextIds())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Ours)]:
        root.removeHandler(old)
    root.addHandler(handler)
    level = LEVELS[level_name]
    root.setLevel(level)
    return level


def _json_wanted() -> bool:
    """Whether TUNEPLANE_LOG_FORMAT asks for json although another logging setting is bad (the
    environment's value alone when the settings file is what is bad)."""
    files: tuple[dict[str, str] | None, ...] = (None, {})
    for file in files:
        try:
            return bool(load_one(LoggingSettings, "format", file=file) == "json")
        except SystemExit:
            continue
    return False


def stop_record(exc: SystemExit) -> bool:
    """A bad setting that stops a process logging json (``SettingExit``, raised at its start or
    later): written as one ERROR record (``msg``, ``fix``, ``field``, ``code``, the role) as
    ``report`` writes an error, instead of SystemExit's plain line; True when it was. In text
    mode, or for another SystemExit, False: the caller lets it go its own way."""
    if not _json or not isinstance(exc, SettingExit):
        return False
    report(InvalidInput(exc.message, fix=exc.fix, field=exc.field or None))
    return True


def uvicorn_level(level: str) -> str:
    """uvicorn's own log level for ``TUNEPLANE_LOG_LEVEL``: its start-up lines only when
    debugging (``warning`` otherwise, as its quiet default)."""
    return level if level in ("debug", "trace") else max(level, "warning", key=LEVELS.__getitem__)


def json_mode() -> bool:
    return _json


def _uncaught(
    kind: type[BaseException], exc: BaseException, tb: types.TracebackType | None
) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    log.critical("uncaught %s: %s", kind.__name__, exc, exc_info=(kind, exc, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    name = args.thread.name if args.thread else "?"
    log.critical(
        "uncaught %s in thread %s: %s",
        args.exc_type.__name__,
        name,
        args.exc_value,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def _emit(level: int, text: str, **extra: object) -> None:
    """A record that is written whatever the level (as a print would be)."""
    record = log.makeRecord(log.name, level, "(say)", 0, text, (), None, extra=extra)
    log.handle(record)


def say(text: str, *, stream: TextIO | None = None, level: int = logging.INFO) -> None:
    """What a process tells its operator (its address, the admin token's file): printed as is
    to ``stream`` (stdout) in text mode; one record (written whatever the level) in json."""
    if _json:
        _emit(level, text)
    else:
        print(text, file=stream or sys.stdout, flush=True)


def report(exc: TunePlaneError, *, stream: TextIO | None = None) -> None:
    """An error that stops the process: ``error:``/``field:``/``fix:`` lines on ``stream``
    (stdout) in text mode; one ERROR record with ``code``, ``field`` and ``fix`` in json."""
    if _json:
        fields = {"code": exc.code, "field": exc.field, "fix": exc.fix or None}
        _emit(logging.ERROR, exc.message, **{k: v for k, v in fields.items() if v})
        return
    from entrypoints.cli.errors import render

    print(render(exc), file=stream or sys.stdout, flush=True)
