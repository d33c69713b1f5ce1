"""A Hub id → its config.json and exact parameter counts, without downloading weights.

Order: the local Hugging Face cache first (``hf_hub_download(..., local_files_only=True)``),
then the Hub: ``hf_hub_download`` for config.json and ``get_safetensors_metadata`` for
the safetensors headers (ranged reads of each file's first bytes; never the tensors).
Everything environmental is huggingface_hub's own: HF_HOME / HF_HUB_CACHE (where the cache
is), HF_HUB_OFFLINE (no requests at all), HF_ENDPOINT (which server), HF_TOKEN (gated and
private repos). Its exceptions become one :class:`HubError` line that says what to do.

Counts exclude buffers (rotary ``inv_freq``) with the same role table the local reader
uses, so Llama-2-7B is 6,738,415,616 parameters, not the 6,738,417,664 values its
safetensors files hold.
"""

from __future__ import annotations

import contextlib
import logging
import os
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from introspect.errors import CheckpointError, HubError

from .tensor_roles import TensorInfo, tally, tensor_info

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True)
class HubModel:
    """What the cache or the Hub told us about one repo at one revision."""

    repo_id: str
    #: The revision asked for (``None`` = the default branch).
    revision: str | None
    config: dict
    #: The cached config.json (inside HF_HUB_CACHE).
    config_path: str
    #: Exact parameters from the safetensors headers (buffers excluded); ``None`` when
    #: the repo has no safetensors files or their headers could not be read.
    parameter_count: int | None
    params_by_dtype: dict[str, int]
    #: Values stored in buffers (rotary inv_freq, causal masks), not parameters.
    buffers_count: int
    #: Where config.json came from.
    origin: str  # "cache" | "hub"
    #: The commit the cache or the Hub resolved the revision to.
    commit: str | None = None
    #: Exact parameters per component (keys of introspect.params.COMPONENTS), or None.
    params_by_component: dict[str, int] | None = None
    notes: tuple[str, ...] = field(default=())


#: The whole resolution's deadline (config.json and the headers, retries included), in
#: seconds, unless ``--timeout`` or the environment variable says otherwise.
DEFAULT_TIMEOUT_S = 30.0
TIMEOUT_ENV = "INTROSPECT_TIMEOUT"


def fetch(repo_id: str, *, revision: str | None = None, timeout: float | None = None) -> HubModel:
    """config.json and exact counts for ``repo_id``: from the cache when it holds the
    config, else from the Hub, all within ``timeout`` seconds (:func:`timeout_seconds`).
    Raises :class:`HubError` (offline and not cached, gated, missing repo/revision/file, a
    failing, silent or trickling Hub, an unusable cache folder)."""
    from huggingface_hub import constants

    from . import hub_deadline

    check_revision(revision)
    limit = timeout_seconds(timeout)
    hub_deadline.check_cache_folder(constants.HF_HUB_CACHE)
    clock = hub_deadline.Deadline(limit, repo_id, constants.ENDPOINT)
    with _quiet(clock):
        config, config_path, origin, notes = clock.run(
            "config.json", lambda: _config(repo_id, revision, clock)
        )
        commit = Path(config_path).parent.name
        tensors, more = _cached_headers(repo_id, revision)
        if tensors is None and not constants.is_offline_mode():
            try:
                tensors, more = clock.run(
                    "safetensors headers", lambda: _hub_headers(repo_id, revision)
                )
            except hub_deadline.OutOfTime as e:
                tensors, more = None, (f"no exact parameter count: {e}",)
        elif tensors is None:
            more = ("offline: no cached safetensors headers, so no exact parameter count",)
        notes += more
    return _model(repo_id, revision, config, str(config_path), origin, commit, tensors, notes)


def timeout_seconds(flag: float | None = None) -> float:
    """The deadline: ``--timeout`` when given, else ``$INTROSPECT_TIMEOUT``, else
    :data:`DEFAULT_TIMEOUT_S`; a value that is not a number of seconds in (0,
    :data:`introspect.bounds.MAX_TIMEOUT_S`] is one line naming where it came from."""
    import math

    from introspect.bounds import MAX_TIMEOUT_S
    from introspect.units import shown

    if flag is not None:
        value, origin = flag, f"--timeout {flag}"
    else:
        text = os.environ.get(TIMEOUT_ENV, "").strip()
        if not text:
            return DEFAULT_TIMEOUT_S
        origin = f"{TIMEOUT_ENV}={shown(text)}"
        try:
            value = float(text)
        except ValueError:
            value = math.nan
    ok = isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S
    if not ok:
        raise HubError(
            f"{origin} is not a number of seconds from 0 to {MAX_TIMEOUT_S:,} "
            f"({MAX_TIMEOUT_S // 3600} hours); give e.g. 30"
        )
    return float(value)


def _config(repo_id: str, revision: str | None, clock) -> tuple[dict, str, str, tuple[str, ...]]:
    """(config, its cache path, origin, notes): the cached config.json, else the Hub's.
    A cached file that is not a JSON object (an HTML error page saved by a proxy, a
    truncated write) is said, with its path, and fetched again once."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HFValidationError

    from introspect.errors import ConfigError

    from .hf_config import load_config

    try:
        path = hf_hub_download(repo_id, CONFIG_FILE, revision=revision, local_files_only=True)
    except HFValidationError as e:
        raise HubError(_invalid_id(repo_id, e)) from e
    except EntryNotFoundError:
        path = None
    except OSError as e:
        raise HubError(_explain(e, repo_id, revision, CONFIG_FILE)) from e
    notes: tuple[str, ...] = ()
    if path is not None:
        try:
            return load_config(path), path, "cache", notes
        except ConfigError as e:
            if constants.is_offline_mode():
                raise HubError(
                    f"the cached config.json of {_at(repo_id, revision)} is {_what(path)}: "
                    f"delete {path} and run online to fetch it again"
                ) from e
            # hf_hub_download(force_download=True) fetches a new blob but keeps an existing
            # snapshot pointer (huggingface_hub/file_download.py creates the pointer only
            # when missing), so the bad pointer goes first.
            what = _what(path)
            try:
                os.remove(path)
            except OSError as err:
                raise HubError(
                    f"the cached config.json of {_at(repo_id, revision)} is {what} and "
                    f"cannot be removed ({err.strerror}); delete {path} by hand"
                ) from err
            notes = (f"the cached {path} was unusable ({what}); fetched it again",)
    elif constants.is_offline_mode():
        raise HubError(
            f"offline (HF_HUB_OFFLINE is set) and {_at(repo_id, revision)} is not in "
            f"the cache (HF_HUB_CACHE={constants.HF_HUB_CACHE}); run once online or "
            "unset HF_HUB_OFFLINE"
        )
    try:
        path = hf_hub_download(
            repo_id,
            CONFIG_FILE,
            revision=revision,
            force_download=bool(notes),
            etag_timeout=clock.per_request(),
        )
    except Exception as e:
        raise HubError(_explain(e, repo_id, revision, CONFIG_FILE, clock)) from e
    try:
        return load_config(path), path, "hub", notes
    except ConfigError as e:
        raise HubError(
            f"the Hub at {constants.ENDPOINT} served a config.json for "
            f"{_at(repo_id, revision)} that is {_what(path)}, saved at {path}; "
            f"check HF_ENDPOINT and any proxy, then delete that file (or run again: an "
            "unusable cached copy is fetched once more)"
        ) from e


def _what(path: str) -> str:
    """What an unusable config.json looks like: an HTML page, or not JSON."""
    try:
        with open(path, "rb") as f:
            head = f.read(512).lstrip().lower()
    except OSError:
        return "unreadable"
    if head.startswith(b"<"):
        return "an HTML page, not JSON"
    return "not a JSON object"


def _model(repo_id, revision, config, config_path, origin, commit, tensors, notes) -> HubModel:
    if tensors is not None:  # quantized weights count the parameters they stand for
        from .quantized import read_quant_config, unpack

        quant = read_quant_config(config, Path(config_path), Path(config_path).parent)
        try:
            tensors, quant_notes = unpack(tensors, quant, where=repo_id)
            notes += tuple(quant_notes)
        except CheckpointError as e:
            tensors, notes = None, (*notes, f"no exact parameter count: {e}")
    if tensors is None:
        return HubModel(
            repo_id=repo_id,
            revision=revision,
            config=config,
            config_path=config_path,
            parameter_count=None,
            params_by_dtype={},
            buffers_count=0,
            origin=origin,
            commit=commit,
            notes=notes,
        )
    counts = tally(tensors)
    if counts.unknown:
        notes += (f"{len(counts.unknown)} tensors with unrecognised names counted as 'other'",)
    if counts.buffers:
        notes += (
            f"{len(counts.buffers)} buffers ({counts.buffer_count:,} values, e.g. "
            f"{counts.buffers[0].name}) are stored but are not parameters",
        )
    return HubModel(
        repo_id=repo_id,
        revision=revision,
        config=config,
        config_path=config_path,
        parameter_count=counts.parameter_count,
        params_by_dtype=counts.params_by_dtype,
        buffers_count=counts.buffer_count,
        origin=origin,
        commit=commit,
        params_by_component=counts.params_by_component,
        notes=notes,
    )


def _cached_headers(
    repo_id: str, revision: str | None
) -> tuple[list[TensorInfo] | None, tuple[str, ...]]:
    """Headers of safetensors files already in the cache (a model downloaded before),
    read locally with ``safe_open``; ``None`` unless every file is cached."""
    from huggingface_hub import try_to_load_from_cache

    from .safetensors import _read_index, read_header

    def cached(name: str) -> Path | None:
        found = try_to_load_from_cache(repo_id, name, revision=revision)
        return Path(found) if isinstance(found, str) else None

    files = []
    single = cached(SINGLE_FILE)
    if single is not None:
        files = [single]
    elif (index := cached(INDEX_FILE)) is not None:
        try:
            shards = sorted(set(_read_index(index).values()))
        except CheckpointError:
            return None, ()
        files = [cached(name) for name in shards]
        if not files or any(f is None for f in files):
            return None, ()
    else:
        return None, ()
    tensors = [t for file in files for t in read_header(file)]
    return tensors, ("counts from the cached safetensors headers",)


def _hub_headers(
    repo_id: str, revision: str | None
) -> tuple[list[TensorInfo] | None, tuple[str, ...]]:
    """Headers from the Hub via ``get_safetensors_metadata`` (ranged reads of each file's
    first bytes). A failure here leaves the count unknown rather than failing the call:
    config.json, which the estimate needs, is already in hand."""
    from huggingface_hub import get_safetensors_metadata
    from huggingface_hub.errors import NotASafetensorsRepoError

    try:
        meta = get_safetensors_metadata(repo_id, revision=revision)
    except NotASafetensorsRepoError:
        return None, (f"{repo_id} has no safetensors files: parameters follow from config.json",)
    except Exception as e:  # any Hub failure: the count is optional, the reason is kept
        reason = _explain(e, repo_id, revision, "safetensors headers")
        return None, (f"no exact parameter count: {reason}",)
    tensors = [
        tensor_info(name, info.shape, info.dtype, file)
        for file, file_meta in sorted(meta.files_metadata.items())
        for name, info in file_meta.tensors.items()
    ]
    return tensors, ("counts from the Hub's safetensors headers",)


def _at(repo_id: str, revision: str | None) -> str:
    return f"{repo_id}@{revision}" if revision else repo_id


def _invalid_id(repo_id: str, e: Exception) -> str:
    return f"'{repo_id}' is not a valid Hub id ({e}); give owner/name, e.g. Qwen/Qwen2.5-0.5B"


def _explain(
    e: Exception,
    repo_id: str,
    revision: str | None,
    what: str,
    clock=None,
) -> str:
    """One line for a huggingface_hub exception: what failed and what to do (and how
    many times huggingface_hub retried or resumed, when ``clock`` counted it)."""
    line = _explain_line(e, repo_id, revision, what)
    return line + (clock.said_retries() if clock is not None else "")


#: errno values that mean the cache, not the network, is the problem.
_CACHE_ERRNOS = ("EACCES", "EPERM", "EROFS", "ENOTDIR", "ENOSPC", "EISDIR", "EDQUOT")


def _explain_line(e: Exception, repo_id: str, revision: str | None, what: str) -> str:
    import errno

    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        FileMetadataError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
        SafetensorsParsingError,
    )

    endpoint = constants.ENDPOINT
    where = _at(repo_id, revision)
    cause = e.__cause__ if isinstance(e, LocalEntryNotFoundError) and e.__cause__ else e
    if isinstance(cause, HFValidationError):
        return _invalid_id(repo_id, cause)
    if isinstance(cause, GatedRepoError):
        return (
            f"{repo_id} is gated: accept its terms at {endpoint}/{repo_id}, then set HF_TOKEN "
            "(or run `hf auth login`) with a token that has access"
        )
    if isinstance(cause, RevisionNotFoundError):
        return f"{repo_id} has no revision '{revision}'; check --revision (a branch, tag or commit)"
    if isinstance(cause, RepositoryNotFoundError):
        return f"no model {repo_id} at {endpoint} (or it is private: set HF_TOKEN); check the id"
    if isinstance(cause, RemoteEntryNotFoundError):
        return f"{where} has no {what}; introspect needs a transformers-style repo with config.json"
    if isinstance(cause, HfHubHTTPError) and cause.response is not None:
        status = cause.response.status_code
        if status in (401, 403):
            return f"not authorised to read {where} ({status}); check HF_TOKEN and its permissions"
        if status >= 500:
            return (
                f"the Hub at {endpoint} failed ({status}) fetching {what} for {where}; "
                "try again later, or use a cached copy with HF_HUB_OFFLINE=1"
            )
        return f"the Hub at {endpoint} answered {status} fetching {what} for {where}"
    if isinstance(cause, FileMetadataError):
        return f"{endpoint} does not answer like the Hugging Face Hub ({cause}); check HF_ENDPOINT"
    if isinstance(cause, SafetensorsParsingError):
        return f"a safetensors header of {where} is unreadable ({' '.join(str(cause).split())})"
    code = getattr(cause, "errno", None)
    if isinstance(cause, OSError) and code in {getattr(errno, n, -1) for n in _CACHE_ERRNOS}:
        place = cause.filename or constants.HF_HUB_CACHE
        return (
            f"cannot write the Hugging Face cache at {place} ({cause.strerror}); point "
            "HF_HOME at a writable folder, or set HF_HUB_OFFLINE=1 to use what is cached"
        )
    if isinstance(cause, httpx2.RemoteProtocolError):
        return (
            f"the Hub at {endpoint} broke off its answer for {what} of {where} "
            f"({_short(cause)}); try again, check HF_ENDPOINT and any proxy, or set "
            "HF_HUB_OFFLINE=1 to use only the cache"
        )
    if isinstance(cause, (httpx2.TransportError, OSError)):
        return (
            f"cannot reach the Hub at {endpoint} for {where} ({type(cause).__name__}); check "
            "the connection, or set HF_HUB_OFFLINE=1 to use only the cache"
        )
    return f"fetching {what} for {where} failed: {' '.join(str(cause).split())}"


def _short(e: BaseException, limit: int = 160) -> str:
    """An exception's text on one line, at most ``limit`` characters."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\0": "NUL"}


def check_revision(revision: str | None) -> None:
    """A ``--revision`` with a control character (a newline, a tab, NUL) is one line
    blaming the argument: huggingface_hub validates repo ids (``validate_repo_id``) but
    has no check for revisions, quotes them into the URL, and the server's confusion
    would otherwise read as a failing connection."""
    if revision is None:
        return
    bad = [c for c in revision if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if bad:
        names = ", ".join(sorted({_CONTROL_NAMES.get(c, f"U+{ord(c):04X}") for c in bad}))
        raise HubError(
            f"--revision {revision!r} contains a control character ({names}); give "
            "a branch, tag or commit on one line, e.g. --revision main"
        )
    if not revision.strip():
        raise HubError("--revision is empty; give a branch, tag or commit, e.g. --revision main")


@contextlib.contextmanager
def _quiet(clock=None) -> Iterator[None]:
    """No progress bars or retry warnings from huggingface_hub on our one-line output;
    its retry warnings are counted on ``clock`` instead (:mod:`.hub_deadline`)."""
    # huggingface_hub.utils.logging sets the library logger to WARNING when it is first
    # imported, which can be later (inside the download) than this: import it first, or
    # the level set here is undone and every resumed download prints two lines.
    import huggingface_hub.file_download  # noqa: F401
    import huggingface_hub.utils.logging  # noqa: F401
    from huggingface_hub.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    from .hub_deadline import RetryCounter

    hub_logger = logging.getLogger("huggingface_hub")
    # http_backoff's "Retrying in 1s [Retry 2/5]" and http_get's "Trying to resume
    # download..." go to the counter, not to stderr
    counted = [logging.getLogger(f"huggingface_hub.{n}") for n in ("utils._http", "file_download")]
    level, bars_off = hub_logger.level, are_progress_bars_disabled()
    states = [(lg.level, lg.propagate) for lg in counted]
    counter = RetryCounter(clock) if clock is not None else None
    hub_logger.setLevel(logging.ERROR)
    if counter is not None:
        for lg in counted:
            lg.setLevel(logging.WARNING)
            lg.propagate = False
            lg.addHandler(counter)
    disable_progress_bars()
    try:
        with warnings.catch_warnings():
            # the library's UserWarnings (a consistency check, a symlink fallback) would
            # print around our one line; what matters reaches the caller as an exception
            warnings.simplefilter("ignore")
            yield
    finally:
        hub_logger.setLevel(level)
        if counter is not None:
            for lg, (lg_level, propagate) in zip(counted, states, strict=True):
                lg.removeHandler(counter)
                lg.setLevel(lg_level)
                lg.propagate = propagate
        if not bars_off:
            enable_progress_bars()
