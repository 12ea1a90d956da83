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
    """The optional plotting library (requirements-charts.txt) is not installed."""


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
