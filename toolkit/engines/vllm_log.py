"""vLLM's log goes to a file in the run folder; only its warnings and errors reach the console (or notebook).

An engine start prints dozens of INFO lines ("Resolved architecture", backend choices, memory profiling) that bury
a CLI summary and fill a notebook's output and HTML report. While a run is in progress `VllmLogCapture` (or the
block of `vllm_log_to`) owns the `vllm` logger: every record at INFO and above goes to `path` (owner-only), each
distinct WARNING and above also to stderr. `toolkit.experiments.runner` does this for every run, so `kvtk replay`,
`kvtk demo` and the notebooks share it.

vLLM replaces its logger's handlers with its own (`dictConfig`) when it is imported and when an engine starts,
unless `VLLM_CONFIGURE_LOGGING=0`; that variable is therefore set for the duration, before vLLM is imported where
possible. An engine that already configured logging in this process does not configure it again for the same
settings, so taking the handlers over afterwards holds too. Nothing here imports vLLM.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterator

VLLM_LOG_NAME = "vllm.log"
VLLM_LOGGER = "vllm"
_FORMAT = "%(asctime)s %(levelname)s [%(name)s:%(lineno)d] %(message)s"


class _FirstTimeOnly(logging.Filter):
    """Passes each distinct message once: every engine start repeats the same warnings (one capture can span
    several engines, started and stopped around each)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


class _OneLine(logging.Formatter):
    """A record's first line only: a warning's traceback (e.g. vLLM's chat-template warm-up without a tokenizer)
    stays in the log file."""

    def format(self, record: logging.LogRecord) -> str:
        lines = super().format(record).splitlines()
        return lines[0] + (f" [{len(lines) - 1} more line(s) in the log file]" if len(lines) > 1 else "")


class VllmLogCapture:
    """Owns the `vllm` logger from `start()` to `stop()`: records at `file_level` and above are appended to `path`
    (mode 0600), those at `console_level` and above also go to stderr, each distinct message once per capture;
    `stop()` puts the logger back as it was. Start and stop it around each engine of a run."""

    def __init__(
        self, path: str | Path, *, console_level: int = logging.WARNING, file_level: int = logging.INFO
    ) -> None:
        self.path = Path(path)
        self.console_level = console_level
        self.file_level = file_level
        # The logger as it was (handlers, level, propagate) and VLLM_CONFIGURE_LOGGING, put back by stop().
        self._saved: tuple[list[logging.Handler], int, bool, str | None] | None = None
        self._handlers: list[logging.StreamHandler[Any]] = []
        self._console_once = _FirstTimeOnly()

    def start(self) -> "VllmLogCapture":
        if self._saved is not None:
            raise RuntimeError(f"vLLM log capture to {self.path} is already started")
        # O_NOFOLLOW: a symlink planted at the log's name is refused, never written through.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.fchmod(fd, 0o600)  # an existing file keeps its mode on open
        to_file = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8"))
        to_file.setLevel(self.file_level)
        to_file.setFormatter(logging.Formatter(_FORMAT))
        to_console = logging.StreamHandler(sys.stderr)
        to_console.setLevel(self.console_level)
        to_console.setFormatter(_OneLine("vLLM %(levelname)s: %(message)s"))
        to_console.addFilter(self._console_once)
        logger = logging.getLogger(VLLM_LOGGER)
        self._saved = (list(logger.handlers), logger.level, logger.propagate, os.environ.get("VLLM_CONFIGURE_LOGGING"))
        os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
        for handler in logger.handlers[:]:
            logger.removeHandler(handler)
        self._handlers = [to_file, to_console]
        for handler in self._handlers:
            logger.addHandler(handler)
        logger.setLevel(min(self.file_level, self.console_level))
        logger.propagate = False
        return self

    def stop(self) -> None:
        if self._saved is None:
            return
        handlers, level, propagate, configure = self._saved
        self._saved = None
        logger = logging.getLogger(VLLM_LOGGER)
        for handler in self._handlers:
            logger.removeHandler(handler)
        for saved in handlers:
            logger.addHandler(saved)
        logger.setLevel(level)
        logger.propagate = propagate
        if configure is None:
            os.environ.pop("VLLM_CONFIGURE_LOGGING", None)
        else:
            os.environ["VLLM_CONFIGURE_LOGGING"] = configure
        to_file = self._handlers[0]
        to_file.close()
        to_file.stream.close()  # closing a stream handler leaves its stream open
        self._handlers = []


@contextlib.contextmanager
def vllm_log_to(
    path: str | Path, *, console_level: int = logging.WARNING, file_level: int = logging.INFO
) -> Iterator[Path]:
    """`VllmLogCapture` for the duration of a block; yields the log's path."""
    capture = VllmLogCapture(path, console_level=console_level, file_level=file_level).start()
    try:
        yield capture.path
    finally:
        capture.stop()
