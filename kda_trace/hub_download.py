"""Read a dataset from the Hugging Face Hub: `hf://ORG/NAME[@REV]` specs and the snapshot download.

Kept apart from `hub` (export, publish and their commands) so that the dataset loader can resolve an
`hf://` root without importing the command layer. Every failure is a `HubError` with one clear message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HF_PREFIX = "hf://"


class HubError(Exception):
    """A problem with exporting, publishing or downloading, as one message for the user."""


# --------------------------------------------------------------------------- hf:// specs


@dataclass(frozen=True)
class HubSpec:
    """A parsed `hf://ORG/NAME[@REV]`."""

    repo_id: str
    revision: Optional[str] = None


def parse_spec(spec: str) -> HubSpec:
    """Parse `hf://ORG/NAME[@REV]` (also `hf://datasets/ORG/NAME[@REV]`); HubError when malformed."""
    usage = f"expected {HF_PREFIX}ORG/NAME or {HF_PREFIX}ORG/NAME@REVISION"
    if not spec.startswith(HF_PREFIX):
        raise HubError(f"dataset {spec!r}: not a Hub dataset ({usage})")
    rest = spec[len(HF_PREFIX):].removeprefix("datasets/")
    repo_id, at, revision = rest.partition("@")
    if at and not revision:
        raise HubError(f"dataset {spec!r}: empty revision after '@' ({usage})")
    check_repo_id(repo_id, f"dataset {spec!r}", f" ({usage})")
    return HubSpec(repo_id, revision or None)


def check_repo_id(repo_id: str, where: str, hint: str = "") -> None:
    """HubError (prefixed by `where`) unless `repo_id` is a valid ORG/NAME."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if repo_id.count("/") != 1:
        raise HubError(f"{where}: the repository must be ORG/NAME{hint}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise HubError(f"{where}: invalid repository id {repo_id!r}: {e}") from None


def download_dataset(spec: str, cache_dir: Optional[Path | str] = None) -> Path:
    """Download (or find in the Hugging Face cache) the dataset `hf://ORG/NAME[@REV]`; its local root.

    Uses `huggingface_hub.snapshot_download(repo_type="dataset")`, so a snapshot already in the cache is
    used offline (HF_HUB_OFFLINE=1 or no network). Raises HubError with one clear message.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    hub = parse_spec(spec)
    where = f"dataset {spec}"
    try:
        path = snapshot_download(hub.repo_id, repo_type="dataset", revision=hub.revision, cache_dir=cache_dir)
    except RevisionNotFoundError:
        raise HubError(f"{where}: revision {hub.revision!r} does not exist in {hub.repo_id}") from None
    except GatedRepoError:
        raise HubError(f"{where}: the repository is gated: accept its terms on the Hub and log in "
                       "(`hf auth login` or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise HubError(f"{where}: no such dataset repository on the Hub (or it is private and no valid token "
                       "was given: set HF_TOKEN or run `hf auth login`)") from None
    except LocalEntryNotFoundError as e:
        raise HubError(f"{where}: the Hub cannot be reached (offline: HF_HUB_OFFLINE=1 or no network) and no "
                       f"complete copy is in the local cache ({first_line(e)})") from None
    except HfHubHTTPError as e:
        raise HubError(f"{where}: the Hub refused the download: {first_line(e)}") from None
    except (OSError, ValueError) as e:
        raise HubError(f"{where}: download failed: {type(e).__name__}: {first_line(e)}") from None
    return Path(path)


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (its type name when empty)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
