"""Typed exceptions shared by the library. Callers catch these, never bare ``Exception``."""

from __future__ import annotations


class CompanionError(Exception):
    """Base class for every error this project raises on purpose."""


class ConfigError(CompanionError):
    """A required setting is missing or invalid."""


class InvalidScopeError(CompanionError, ValueError):
    """A user or chat id that cannot name a memory scope."""


class StorageError(CompanionError):
    """The database could not complete an operation (locked, corrupt, full)."""


class RefusedDataError(StorageError):
    """The database refused the values themselves (a character or a constraint it cannot take): the same
    write fails however often it is tried, unlike a busy or unreachable database."""


class UnfinishedMigrationError(StorageError):
    """The database is the target of a ``migrate`` that has not finished: it may hold part of a copy."""


class MigrationMismatchError(StorageError):
    """The target of a copy (``migrate``) does not hold what the source holds after the copy (it was written to
    meanwhile, or held other data under the same handles)."""


class DatabaseBusyError(StorageError):
    """The database stayed locked past the busy timeout."""


class LLMError(CompanionError):
    """The language model could not produce a usable answer."""


class LLMUnavailableError(LLMError):
    """Network, timeout, rate limit or server error after all retries."""


class LLMBadResponseError(LLMError):
    """The model answered, but with blank content or JSON of the wrong shape."""


class BackupError(CompanionError):
    """A backup could not be written."""


class ChartUnavailableError(CompanionError):
    """The optional plotting library (matplotlib, the extra [charts]) is not installed."""


class RestoreError(CompanionError):
    """A backup could not be restored; the live database was not changed."""


class PromptError(CompanionError):
    """A prompt template is missing or was rendered with the wrong inputs."""


class MemoryNotFoundError(CompanionError, LookupError):
    """No memory has this handle (never issued, or not in this scope's table)."""


class NotYourMemoryError(CompanionError, PermissionError):
    """The handle names another scope's memory: the caller may not read or change it."""


class NothingToUndoError(CompanionError, LookupError):
    """An undo of a change that is not there (already undone, or the memory changed since)."""


class DidaError(CompanionError):
    """Dida365 (TickTick) answered with an error the sync cannot read past (a bad request, a malformed body).
    ``status``: the HTTP status, 0 when none came back."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class DidaAuthError(DidaError):
    """The access token was refused (401): the link is broken until the user links again."""


class DidaRateLimitedError(DidaError):
    """Over the request limit (Dida365 answers HTTP 500 ``exceed_query_limit``, not 429): wait about a minute."""


class DidaUnavailableError(DidaError):
    """A timeout, a refused connection or a 5xx: nothing is lost, the change is sent again later."""


class DidaLinkError(DidaError):
    """The kanban cannot be linked as asked: a code or state that is unknown or expired, no token key."""
