"""Models by their Hugging Face Hub id: the config.json, and the safetensors index's total size as a cross-check of
the parameter bytes, fetched with huggingface_hub into its own disk cache.

huggingface_hub is imported by the first fetch, so that neither the command line's start nor the server's grows.
Its usual settings hold: HF_ENDPOINT, HF_HOME or HF_HUB_CACHE, the token of HF_TOKEN or of `hf auth login` for gated
models, and HF_HUB_OFFLINE (the cache alone is read). A fetch runs in a thread of its own and is waited for at most
`timeout_s`; a file larger than its limit is refused from the size the Hub states, before it is downloaded. The
server fetches only when its operator sets TRAINMEM_HUB=1 (`server_fetch`); the command line always may.

Every failure is a DomainError at ``model.hub`` (or ``model.revision``) whose `kind` names the cause.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from app.core import DomainError

FIELD: Final = "model.hub"
REVISION_FIELD: Final = "model.revision"
CONFIG_FILE: Final = "config.json"
INDEX_FILE: Final = "model.safetensors.index.json"

SETTING: Final = "TRAINMEM_HUB"  # "1" lets the server fetch
TIMEOUT_SETTING: Final = "TRAINMEM_HUB_TIMEOUT_S"
SERVER_TIMEOUT_S: Final = 5.0
MAX_SERVER_TIMEOUT_S: Final = 9.0  # under the server's 10 s answer deadline (app.middleware.REQUEST_DEADLINE_S)
CLI_TIMEOUT_S: Final = 30.0
MAX_CONFIG_BYTES: Final = 1 << 20  # as much as a request body may carry as model.hf_config
MAX_INDEX_BYTES: Final = 16 << 20  # the index names every tensor: a few MB for the largest models
MAX_FETCHING: Final = 8  # fetches at once; one past its time limit keeps its place until its reads time out
WEIGHTS_TOLERANCE: Final = 0.03  # the index's bytes may differ from the count's by this fraction unremarked

# A repository id as the Hub spells it (huggingface_hub's validate_repo_id checks the rest); a branch, tag or commit.
MAX_ID_CHARS: Final = 96
ID_PATTERN: Final = r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*$"
MAX_REVISION_CHARS: Final = 255
REVISION_PATTERN: Final = r"^[A-Za-z0-9_.-][A-Za-z0-9_./-]*$"
# The config's dtype names (torch_dtype, or dtype since transformers 5) and their widths.
DTYPE_BITS: Final = {"float32": 32, "float16": 16, "bfloat16": 16, "float8_e4m3fn": 8, "float8_e5m2": 8}
_TRUE: Final = ("1", "on", "yes", "true")

_fetching = threading.BoundedSemaphore(MAX_FETCHING)
T = TypeVar("T")


@dataclass(frozen=True)
class HubModel:
    """What the Hub holds for a model at one revision: its config, and its weights' bytes where an index says."""

    repo_id: str
    revision: str | None
    commit: str | None  # the commit the config came from
    config_text: str  # config.json as fetched (app.wire reads it within the bounds of a pasted one)
    weights_bytes: int | None = None  # model.safetensors.index.json's metadata.total_size


Fetch = Callable[[str, "str | None"], HubModel]


def _is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


def offline() -> bool:
    """HF_HUB_OFFLINE, read at each fetch (huggingface_hub reads it once, at import)."""
    return _is_true(os.environ.get("HF_HUB_OFFLINE"))


def check_id(repo_id: str, revision: str | None = None) -> None:
    if len(repo_id) > MAX_ID_CHARS or not re.fullmatch(ID_PATTERN, repo_id) or "--" in repo_id or ".." in repo_id:
        raise DomainError(FIELD, f"{_short(repo_id)} is not a Hub model id: write it as on the Hub, e.g. "
                                 "Qwen/Qwen2.5-7B-Instruct", kind="hub_invalid_id")
    if revision is not None and (len(revision) > MAX_REVISION_CHARS or not re.fullmatch(REVISION_PATTERN, revision)):
        raise DomainError(REVISION_FIELD, f"{_short(revision)} is not a branch, tag or commit",
                          kind="hub_invalid_id")


def _short(text: str) -> str:
    return repr(text if len(text) <= 100 else text[:97] + "...")


# --- fetching -------------------------------------------------------------------------------------------------


def fetch(repo_id: str, revision: str | None = None, *, timeout_s: float = CLI_TIMEOUT_S) -> HubModel:
    """The model's config.json and its index's total size, from the Hub or huggingface_hub's cache; within
    `timeout_s` for both, or a DomainError saying which failure it was."""
    check_id(repo_id, revision)
    deadline = time.monotonic() + timeout_s
    commit, text = _within(deadline, lambda: _download(repo_id, revision, CONFIG_FILE, MAX_CONFIG_BYTES, timeout_s),
                           repo_id=repo_id, timeout_s=timeout_s)
    try:  # the index is a cross-check only: without it in time, the estimate goes on unchecked
        index = _within(deadline, lambda: _download(repo_id, commit or revision, INDEX_FILE, MAX_INDEX_BYTES,
                                                    timeout_s), repo_id=repo_id, timeout_s=timeout_s)
    except DomainError:
        index = None
    return HubModel(repo_id, revision, commit, text, _total_size(index[1]) if index else None)


def server_fetch(repo_id: str, revision: str | None = None) -> HubModel:
    """`fetch` as the server may: only with TRAINMEM_HUB=1, within TRAINMEM_HUB_TIMEOUT_S (default 5 s)."""
    if not _is_true(os.environ.get(SETTING)):
        raise DomainError(FIELD, f"this server does not fetch from the Hugging Face Hub: its operator allows it "
                                 f"with {SETTING}=1. Give the model's config.json instead",
                          kind="hub_disabled")
    return fetch(repo_id, revision, timeout_s=server_timeout_s())


def server_timeout_s() -> float:
    """TRAINMEM_HUB_TIMEOUT_S, at most MAX_SERVER_TIMEOUT_S; the default where it is not a positive number."""
    try:
        value = float(os.environ.get(TIMEOUT_SETTING, SERVER_TIMEOUT_S))
    except ValueError:
        return SERVER_TIMEOUT_S
    return min(value, MAX_SERVER_TIMEOUT_S) if value > 0 else SERVER_TIMEOUT_S


def _within(deadline: float, work: Callable[[], T], *, repo_id: str, timeout_s: float) -> T:
    """`work()` in a thread of its own, waited for until `deadline`: the thread cannot be stopped, but the caller
    answers in time (the route's worker thread, and so the request's deadline, are not held)."""
    late = DomainError(FIELD, f"no answer from the Hugging Face Hub for {repo_id} within {timeout_s:g} s",
                       kind="hub_timeout")
    if not _fetching.acquire(timeout=max(0.0, deadline - time.monotonic())):
        raise late
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error
        finally:
            _fetching.release()

    thread = threading.Thread(target=run, name="hub-fetch", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise late
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _download(repo_id: str, revision: str | None, filename: str, limit: int, timeout_s: float) -> tuple[str | None, str]:
    """(commit, text) of one file, its size checked against `limit` before it is downloaded. A Hub that cannot be
    reached leaves the cache to answer, without huggingface_hub's retries."""
    import httpx2
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    endpoint = os.environ.get("HF_ENDPOINT") or None
    commit, unreachable = None, None
    try:
        if not offline():
            url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
            try:
                metadata = get_hf_file_metadata(url, timeout=timeout_s, endpoint=endpoint)
            except httpx2.TransportError as error:
                unreachable = error  # the cache may still hold the file
            else:
                _check_size(repo_id, filename, metadata.size, limit)
                commit = metadata.commit_hash
        path = hf_hub_download(repo_id, filename, revision=revision, endpoint=endpoint, etag_timeout=timeout_s,
                               local_files_only=offline() or unreachable is not None)
        _check_size(repo_id, filename, os.path.getsize(path), limit)
        with open(path, encoding="utf-8") as file:
            return commit, file.read()
    except DomainError:
        raise
    except Exception as error:
        raise _failure(unreachable or error, repo_id, revision, filename) from None


def _check_size(repo_id: str, filename: str, size: int | None, limit: int) -> None:
    if size is not None and size > limit:
        raise DomainError(FIELD, f"{repo_id}'s {filename} is {size:,} bytes, more than the {limit:,} this reads",
                          kind="hub_too_large")


def _failure(error: Exception, repo_id: str, revision: str | None, filename: str) -> DomainError:
    """The DomainError for what huggingface_hub (or its HTTP client) raised."""
    refused = _refused(error, repo_id, revision, filename)
    return refused if refused is not None else _unreached(error, repo_id, filename)


_TOKEN: Final = "HF_TOKEN, or the token saved by `hf auth login`"


def _refused(error: Exception, repo_id: str, revision: str | None, filename: str) -> DomainError | None:
    """What the Hub answered and refused: a gated, missing or private model, revision or file, or the token."""
    from huggingface_hub import errors

    if isinstance(error, errors.GatedRepoError):
        if error.response.status_code == 403:
            return DomainError(FIELD, f"{repo_id} is gated and the token given has not been granted access: ask "
                                      "for access on the model's page with the same account", kind="hub_gated")
        return DomainError(FIELD, f"{repo_id} is gated: accept its terms on the Hub, then give a token ({_TOKEN})",
                           kind="hub_gated")
    if isinstance(error, errors.RepositoryNotFoundError):
        return DomainError(FIELD, f"no model {repo_id} on the Hugging Face Hub (or it is private and no token "
                                  "given reaches it)", kind="hub_not_found")
    if isinstance(error, errors.RevisionNotFoundError):
        return DomainError(REVISION_FIELD, f"{repo_id} has no revision {revision!r}", kind="hub_not_found")
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return DomainError(FIELD, f"{repo_id} has no {filename}: it is not a transformers model",
                           kind="hub_not_a_model")
    if isinstance(error, errors.HfHubHTTPError) and error.response.status_code == 401:
        return DomainError(FIELD, f"the Hugging Face Hub refused the token ({_TOKEN}) for {repo_id}",
                           kind="hub_token_refused")
    return None


def _unreached(error: Exception, repo_id: str, filename: str) -> DomainError:
    """The Hub not reached (offline, too slow, unreachable) with the files not in the cache, or an id it refuses
    to look up."""
    import httpx2
    from huggingface_hub import errors

    if isinstance(error, errors.LocalEntryNotFoundError | errors.OfflineModeIsEnabled) and offline():
        return DomainError(FIELD, f"HF_HUB_OFFLINE is set and {repo_id}'s {filename} is not in huggingface_hub's "
                                  "cache: fetch it once while online", kind="hub_offline")
    if isinstance(error, httpx2.TimeoutException):
        return DomainError(FIELD, f"the Hugging Face Hub did not answer in time for {repo_id}, and its files are not in "
                                  "the cache", kind="hub_timeout")
    if isinstance(error, errors.HFValidationError):
        return DomainError(FIELD, f"{_short(repo_id)} is not a Hub model id: {error}", kind="hub_invalid_id")
    return DomainError(FIELD, f"the Hugging Face Hub could not be reached for {repo_id} ({type(error).__name__}), "
                              "and its files are not in the cache", kind="hub_unreachable")


# --- reading --------------------------------------------------------------------------------------------------


def _total_size(text: str) -> int | None:
    try:
        index = json.loads(text)
    except (ValueError, RecursionError):
        return None
    metadata = index.get("metadata") if isinstance(index, dict) else None
    size = metadata.get("total_size") if isinstance(metadata, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def checked(repo_id: str, config: Mapping[str, Any], read: Callable[[Mapping[str, Any]], T]) -> T:
    """`read(config)` (the architecture), with a refusal put at model.hub: the person gave the id, not the file."""
    try:
        return read(config)
    except DomainError as error:
        key = error.field.removeprefix("model.hf_config").lstrip(".")
        where = f"{repo_id}'s {CONFIG_FILE}" + (f", {key}" if key else "")
        kind = "hub_not_a_model" if key in ("", "model_type") else error.kind
        raise DomainError(FIELD, f"{where}: {error.message}", kind=kind) from None


def weights_warning(model: HubModel, config: Mapping[str, Any], param_count: int) -> str | None:
    """A caveat when the checkpoint's bytes (the index's total_size) and the estimate's parameters at the config's
    dtype disagree by more than WEIGHTS_TOLERANCE: bytes = ceil(parameters × bits / 8). Quantized checkpoints and
    configs without a known dtype are not compared."""
    dtype = config.get("torch_dtype") or config.get("dtype")
    if model.weights_bytes is None or dtype not in DTYPE_BITS or "quantization_config" in config:
        return None
    bits = DTYPE_BITS[dtype]
    expected = (param_count * bits + 7) // 8
    if abs(model.weights_bytes - expected) <= WEIGHTS_TOLERANCE * expected:
        return None
    stored = model.weights_bytes * 8 // bits
    share = abs(stored - param_count) / param_count
    return (f"{model.repo_id}'s checkpoint holds {model.weights_bytes:,} bytes of weights ({INDEX_FILE}), "
            f"{stored:,} parameters in {dtype}, {share:.0%} {'more' if stored > param_count else 'fewer'} than the "
            f"{param_count:,} counted here: it may hold parts the estimate leaves out (a vision tower, extra "
            "prediction layers), or its config may not describe it fully.")
