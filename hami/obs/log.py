"""Leveled logging: structlog for severity, a separate klog-style verbosity gate.

    log = get_logger(__name__)
    log.info("Bound pod", pod="ns/p", node="n1")
    log.v(4).info("Node filtered out", pod="ns/p", node="n1", reason="CardInsufficientMemory")

`-v` meanings follow klog: 0 errors and key events, 2 scoring details, 4 per-node filter decisions,
5 full trace. A closed `log.v(n)` returns a shared no-op logger: one integer compare, no allocation.

Text output looks like Kubernetes structured klog lines:
    I1121 10:30:15.123456 1 fit.py:150] "Node filtered out" pod="default/p" node="gpu-node-01"
JSON output is one orjson object per line.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import orjson
import structlog

_LEVEL_LETTER = {"debug": "I", "info": "I", "warning": "W", "warn": "W", "error": "E", "critical": "F",
                 "exception": "E"}
_SECRET_KEYS = ("token", "password", "secret", "authorization", "bearer", "client-key", "key_data")


class _Gate:
    """The process-wide verbosity; set once by configure_logging (logging is inherently global)."""

    __slots__ = ("verbosity",)

    def __init__(self) -> None:
        self.verbosity = 0


_gate = _Gate()


class _NullLogger:
    __slots__ = ()

    def _noop(self, *args: Any, **kwargs: Any) -> None:
        return None

    debug = info = warning = warn = error = exception = critical = msg = _noop

    def bind(self, **kwargs: Any) -> _NullLogger:
        return self


_NULL = _NullLogger()


class Logger:
    """A named logger with severity methods and a `v(n)` verbosity gate."""

    __slots__ = ("_log", "name")

    def __init__(self, name: str, bound: Any = None):
        self.name = name
        self._log = bound if bound is not None else structlog.get_logger(name)

    def v(self, level: int) -> Any:
        return self._log if level <= _gate.verbosity else _NULL

    def enabled(self, level: int) -> bool:
        return level <= _gate.verbosity

    def bind(self, **kwargs: Any) -> Logger:
        return Logger(self.name, self._log.bind(**kwargs))

    def debug(self, event: str, **kw: Any) -> None:
        if _gate.verbosity >= 5:
            self._log.debug(event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._log.info(event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._log.warning(event, **kw)

    warn = warning

    def error(self, event: str, **kw: Any) -> None:
        self._log.error(event, **kw)

    def exception(self, event: str, **kw: Any) -> None:
        self._log.exception(event, **kw)


def get_logger(name: str) -> Logger:
    return Logger(name.rsplit(".", 1)[-1] if name.startswith("hami.") else name)


def verbosity() -> int:
    return _gate.verbosity


# --------------------------------------------------------------------------- rendering

def _redact(event_dict: dict) -> dict:
    for key in list(event_dict):
        lk = key.lower()
        if any(s in lk for s in _SECRET_KEYS):
            event_dict[key] = "<redacted>"
    return event_dict


def _redact_processor(logger: Any, method: str, event_dict: dict) -> dict:
    return _redact(event_dict)


def _quote(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value is None:
        return "<nil>"
    if not isinstance(value, str):
        value = str(value)
    return orjson.dumps(value).decode()


class KlogRenderer:
    """Render an event dict as a klog structured text line."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __call__(self, logger: Any, method: str, event_dict: dict) -> str:
        ts = event_dict.pop("_ts", None) or time.time()
        lt = time.localtime(ts)
        micros = int((ts % 1) * 1_000_000)
        letter = _LEVEL_LETTER.get(method, "I")
        filename = event_dict.pop("filename", "?")
        lineno = event_dict.pop("lineno", 0)
        event = event_dict.pop("event", "")
        exc = event_dict.pop("exception", None)
        event_dict.pop("logger", None)
        event_dict.pop("level", None)
        head = (
            f"{letter}{lt.tm_mon:02d}{lt.tm_mday:02d} {lt.tm_hour:02d}:{lt.tm_min:02d}:{lt.tm_sec:02d}."
            f"{micros:06d} {self.pid} {filename}:{lineno}] {_quote(event)}"
        )
        parts = [head]
        parts.extend(f"{k}={_quote(v)}" for k, v in event_dict.items())
        line = " ".join(parts)
        if exc:
            line += "\n" + str(exc)
        return line


def _json_renderer(logger: Any, method: str, event_dict: dict) -> str:
    event_dict.setdefault("level", method)
    event_dict["ts"] = event_dict.pop("_ts", None) or time.time()
    return orjson.dumps(event_dict, default=str).decode()


def _stamp(logger: Any, method: str, event_dict: dict) -> dict:
    event_dict["_ts"] = time.time()
    return event_dict


class LogRing:
    """A stream that writes through to `out` and keeps the last `size` lines (the embedded cluster
    serves them as `kubectl logs` of its scheduler pod)."""

    def __init__(self, out: Any, size: int = 5000):
        from collections import deque

        self.out = out
        self.lines: deque[str] = deque(maxlen=size)
        self._partial = ""

    def write(self, text: str) -> int:
        self.out.write(text)
        data = self._partial + text
        *complete, self._partial = data.split("\n")
        self.lines.extend(complete)
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def tail(self) -> list[str]:
        return list(self.lines)


def configure_logging(verbosity: int = 0, fmt: str = "text", stream: Any = None) -> None:
    """Configure structlog once for the process. Called by the CLI before roles start."""
    _gate.verbosity = max(0, int(verbosity))
    stream = stream or sys.stderr
    min_level = logging.DEBUG if verbosity >= 5 else logging.INFO
    processors: list[Any] = [
        structlog.processors.add_log_level,
        _stamp,
        _redact_processor,
        structlog.processors.CallsiteParameterAdder(
            [structlog.processors.CallsiteParameter.FILENAME, structlog.processors.CallsiteParameter.LINENO],
            additional_ignores=["hami.obs.log"],
        ),
        structlog.processors.format_exc_info,
    ]
    if fmt == "json":
        processors.append(_json_renderer)
    else:
        processors.append(KlogRenderer())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(min_level),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
