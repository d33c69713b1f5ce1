"""Bounded waits on the Hub: one total deadline for a whole resolution, retries counted,
a progress line when a read is slow, and the cache folder checked before it is used.

huggingface_hub's own timeouts are per request (``etag_timeout``, the download's read
timeout, ``huggingface_hub/file_download.py``) and its ``http_backoff`` retries 5xx and
network errors up to 5 times (``huggingface_hub/utils/_http.py``): a server that answers
one byte at a time, or not at all between retries, can hold a caller for minutes. So each
stage runs in a daemon thread and the caller stops waiting at the deadline; an
abandoned thread holds only a socket and dies with the process.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from introspect.errors import HubError

T = TypeVar("T")

#: Seconds a stage may take before the progress line is shown.
PROGRESS_AFTER_S = 1.0
#: Show the progress line even when stderr is not a terminal.
PROGRESS_ENV = "INTROSPECT_PROGRESS"
#: The longest a single request may wait for an answer (huggingface_hub's default).
PER_REQUEST_S = 10.0

_RETRY = re.compile(r"\[Retry (\d+)/(\d+)\]")


class OutOfTime(HubError):
    """The deadline passed before the Hub answered."""


class Deadline:
    """The time left for resolving one repo, and what happened on the way."""

    def __init__(self, seconds: float, repo_id: str, endpoint: str) -> None:
        self.seconds = seconds
        self.repo_id = repo_id
        self.endpoint = endpoint
        self.end = time.monotonic() + seconds
        #: (retries made, retries allowed) as huggingface_hub logged them.
        self.retries: tuple[int, int] | None = None
        #: Downloads huggingface_hub resumed after the server broke off (``http_get``).
        self.resumes = 0

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def per_request(self) -> float:
        """A single request's timeout: the library's default, or less when little is left."""
        return max(0.1, min(PER_REQUEST_S, self.left()))

    def run(self, stage: str, fn: Callable[[], T]) -> T:
        """``fn()``'s result, or :class:`OutOfTime` once the deadline passes; its
        exceptions are raised here. A progress line on stderr after a second (on a
        terminal, or with ``INTROSPECT_PROGRESS=1``)."""
        box: dict[str, object] = {}

        def work() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:  # handed to the caller's thread
                box["error"] = e

        thread = threading.Thread(target=work, name=f"hub {stage}", daemon=True)
        thread.start()
        thread.join(min(PROGRESS_AFTER_S, self.left()))
        shown = False
        if thread.is_alive() and self.left() > 0:
            shown = _progress(
                f"introspect: waiting for {stage} of {self.repo_id} from {self.endpoint} "
                f"(gives up in {self.left():.0f} s; --timeout changes it)"
            )
            thread.join(self.left())
        if shown and sys.stderr.isatty():
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        if thread.is_alive():
            raise OutOfTime(
                f"gave up on {stage} of {self.repo_id} after {self.seconds:g} s: the Hub at "
                f"{self.endpoint} did not finish answering{self.said_retries()}; raise "
                "--timeout (or INTROSPECT_TIMEOUT), check HF_ENDPOINT and the connection, "
                "or set HF_HUB_OFFLINE=1 to use only the cache"
            )
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]  # type: ignore[return-value]

    def said_retries(self) -> str:
        """``" (3 of 5 retries made)"`` when huggingface_hub retried a request, ``" (5
        resumed downloads)"`` when it resumed a broken-off one, else ``""``."""
        said = []
        if self.retries is not None:
            said.append(f"{self.retries[0]} of {self.retries[1]} retries made")
        if self.resumes:
            said.append(f"{self.resumes} resumed download{'s' if self.resumes > 1 else ''}")
        return f" ({', '.join(said)})" if said else ""

    def count(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        found = _RETRY.search(message)
        if found:
            self.retries = (int(found[1]), int(found[2]))
        elif "Trying to resume download" in message:
            self.resumes += 1


class RetryCounter(logging.Handler):
    """Feeds huggingface_hub's "Retrying in 1s [Retry 2/5]" and "Trying to resume
    download..." warnings to a Deadline."""

    def __init__(self, clock: Deadline) -> None:
        super().__init__(logging.WARNING)
        self.clock = clock

    def emit(self, record: logging.LogRecord) -> None:
        self.clock.count(record)


def _progress(line: str) -> bool:
    tty = sys.stderr.isatty()
    if not tty and os.environ.get(PROGRESS_ENV) != "1":
        return False
    sys.stderr.write(line + ("" if tty else "\n"))
    sys.stderr.flush()
    return True


def check_cache_folder(cache: str | os.PathLike[str]) -> None:
    """The Hugging Face cache (HF_HUB_CACHE, under HF_HOME) must be a folder, or not exist
    yet under one: a file in its place, or a folder that cannot be read, is the cause to
    report — not an unreachable Hub."""
    path = Path(cache)
    for folder in (path, *path.parents):
        try:
            if not folder.exists():
                continue
        except OSError as e:
            raise HubError(_cache_line(path, f"{folder} cannot be examined ({e.strerror})")) from e
        if not folder.is_dir():
            raise HubError(_cache_line(path, f"{folder} is a file, not a folder"))
        if not os.access(folder, os.R_OK | os.X_OK):
            raise HubError(_cache_line(path, f"{folder} cannot be read (permissions)"))
        return


def _cache_line(cache: Path, why: str) -> str:
    return (
        f"the Hugging Face cache {cache} cannot be used: {why}; point HF_HOME (or "
        "HF_HUB_CACHE) at a folder you can read and write"
    )
