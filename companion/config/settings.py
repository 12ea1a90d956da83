"""The one place that reads the environment: every setting, with its default, lives here."""

from __future__ import annotations

import hashlib
import hmac
import re
import socket
from datetime import time
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from companion.core.errors import ConfigError

DB_NAME = "memory.sqlite3"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# sqlite:///<path>: a relative path after the three slashes, an absolute one after four (SQLAlchemy's spelling).
SQLITE_PREFIX = "sqlite:///"
DEFAULT_LLM_BASE_URL = "https://api.deepseek.com"
WEBHOOK_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
LOCAL_KEY = "no-key"  # sent to a server of one's own when LLM_API_KEY is empty; Ollama and llama.cpp ignore it
# Where each required key comes from, said in the same line that says it is missing.
WHERE_TO_GET = {
    "TELEGRAM_BOT_TOKEN": "a bot token from @BotFather in Telegram",
    "LLM_API_KEY": "a key from the DeepSeek platform https://platform.deepseek.com, or set LLM_BASE_URL to "
                   "any OpenAI-compatible server (a local one needs no key: docs/console.md)",
}
DEFAULT_IMPORTANT_KEYWORDS = (
    "生病", "感冒", "发烧", "住院", "手术", "确诊", "离职", "辞职", "失业", "入职", "生日", "分手", "恋爱",
    "结婚", "离婚", "怀孕", "去世", "搬家", "毕业", "考试", "面试", "升职", "跳槽", "换工作",
    # A new pet ("我又养了一只小狗") is learned the day it comes home.
    "养了",
    # Health facts that last: learned at once, not 8-12 turns later.
    "过敏", "哮喘", "糖尿病", "高血压", "抑郁", "骨折", "吃药", "药物",
)


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.replace("，", ",").split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Configuration from the environment and ``.env``; ``.env.example`` documents every key."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    telegram_bot_token: SecretStr | None = None
    telegram_api_base: str = "https://api.telegram.org"
    # Webhook mode (docs/operator.md, "Webhook"): Telegram posts updates to WEBHOOK_URL, which a reverse proxy
    # with TLS forwards to WEBHOOK_LISTEN:WEBHOOK_PORT. Empty: the bot polls.
    webhook_url: str = ""
    webhook_secret: SecretStr | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(default=8080, ge=1, le=65535)
    # The memory board (a Telegram Mini App, docs/usage.md): the public HTTPS address its page is reached at
    # (empty: no board); the bot serves it on WEBHOOK_LISTEN, beside the webhook or on WEBAPP_PORT when polling.
    webapp_url: str = ""
    webapp_port: int = Field(default=8081, ge=1, le=65535)
    # Several worker processes (docs/operator.md, "Workers"): updates go through Redis Streams at REDIS_URL.
    # Empty: the process that receives an update handles it. WORKERS > 1 needs REDIS_URL and a shared database.
    redis_url: str = ""
    redis_prefix: str = Field(default="companion", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    workers: int = Field(default=1, ge=1, le=64)
    llm_api_key: SecretStr | None = None
    llm_base_url: str = DEFAULT_LLM_BASE_URL
    llm_model: str = "deepseek-chat"
    llm_timeout_seconds: float = Field(default=30.0, gt=0)
    llm_max_retries: int = Field(default=3, ge=0, le=10)
    llm_tools_enabled: bool = True
    data_dir: Path = Path("data")
    backup_dir: Path = Path("backups")
    # Empty: SQLite in DATA_DIR/memory.sqlite3 (see ``database``). A scheme no backend registered is
    # refused when the store opens (``companion.storage.factory``).
    database_url: str = ""
    timezone: str = "Asia/Shanghai"
    admin_ids: Annotated[list[int], NoDecode] = Field(default_factory=list)
    log_level: str = "INFO"
    # uvloop where it is installed (requirements.txt), else asyncio's loop (companion.config.runtime).
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    stop_timeout_seconds: float = Field(default=8.0, gt=0, le=60)

    quiet_seconds: float = Field(default=2.0, ge=0)
    history_turns: int = Field(default=10, ge=1, le=100)
    recall_max: int = Field(default=2, ge=0, le=10)
    recall_min_importance: float = Field(default=50.0, ge=0, le=100)
    recall_min_match: float = Field(default=0.25, ge=0, le=1)
    recall_cooldown_turns: int = Field(default=5, ge=0)
    recall_max_rate: float = Field(default=0.2, ge=0, le=1)
    extract_every_min: int = Field(default=8, ge=1)
    extract_every_max: int = Field(default=12, ge=1)
    extract_max_turns: int = Field(default=12, ge=1, le=50)
    important_keywords: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_IMPORTANT_KEYWORDS)
    )
    profile_ttl_hours: float = Field(default=24.0, gt=0)
    profile_min_importance: float = Field(default=30.0, ge=0, le=100)
    profile_refresh_min_minutes: float = Field(default=360.0, ge=0)
    decay_time: time = time(3, 0)
    backup_time: time = time(3, 30)
    backup_keep_days: int = Field(default=30, ge=1)
    restore_keep_copies: int = Field(default=3, ge=0)
    console_user_id: int = Field(default=1, ge=1)
    memory_capacity: int = Field(default=200, ge=10, le=100_000)
    index_cache_mb: int = Field(default=48, ge=8)
    review_hours: Annotated[tuple[int, int], NoDecode] = (9, 21)
    review_unanswered_days: float = Field(default=3.0, gt=0)
    # Follow-ups written first (docs/memory.md): the operator's switch, the local hours, how often the job looks.
    followups: bool = True
    followup_hours: Annotated[tuple[int, int], NoDecode] = (10, 21)
    followup_check_minutes: float = Field(default=30.0, ge=0.1, le=24 * 60)
    idle_summary_minutes: float = Field(default=5.0, gt=0)
    group_memory_limit: int = Field(default=10, ge=0, le=50)

    # Semantic recall: by default multilingual-e5-small in process where its wheel installs (Linux x86_64);
    # an OpenAI-compatible embeddings endpoint or a local sentence-transformers folder take precedence when set;
    # EMBEDDINGS=off leaves recall to keywords.
    embeddings: Literal["auto", "off"] = "auto"
    embedding_base_url: str = ""
    embedding_model: str = ""
    embedding_api_key: SecretStr | None = None
    embedding_local_model: str = ""
    embedding_dimensions: int | None = Field(default=None, ge=1, le=8192)
    embedding_batch_size: int = Field(default=32, ge=1, le=2048)
    embedding_timeout_seconds: float = Field(default=10.0, gt=0)
    embedding_query_timeout_seconds: float = Field(default=2.0, gt=0)
    embedding_min_similarity: float = Field(default=0.2, ge=-1, le=1)
    embedding_min_standout: float = Field(default=5.0, ge=0)
    embedding_retry_after_seconds: float = Field(default=60.0, ge=0)

    # The Dida365 (TickTick) kanban of the memory tiers (optional, off unless the three app keys are set):
    # docs/dida365.md. Base URLs point at TickTick or a local fake the same way.
    dida_client_id: str = ""
    dida_client_secret: SecretStr | None = None
    dida_redirect_uri: str = ""
    dida_auth_base: str = "https://dida365.com"
    dida_api_base: str = "https://api.dida365.com"
    dida_token_key: SecretStr | None = None  # Fernet key the access tokens are encrypted with at rest
    dida_callback_port: int | None = Field(default=None, ge=1, le=65535)
    dida_poll_minutes: float = Field(default=10.0, gt=0)
    dida_tier_tags: bool = True

    @field_validator("review_hours", "followup_hours", mode="before")
    @classmethod
    def _hours(cls, value: object) -> object:
        """"9,21", "[9,21]" or "9-21": the first and the last local hour messages may be sent in."""
        if isinstance(value, str):
            value = _split_csv(value.strip().strip("[]").replace("-", ","))
        return value

    @field_validator("review_hours", "followup_hours")
    @classmethod
    def _hours_order(cls, value: tuple[int, int]) -> tuple[int, int]:
        if not 0 <= value[0] < value[1] <= 24:
            raise ValueError(f"must be two hours 0-24, the first before the second, such as 9,21; not {value}")
        return value

    @field_validator("log_level")
    @classmethod
    def _level_by_name(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}; not {value!r}")
        return value.upper()

    @field_validator("webhook_listen")
    @classmethod
    def _local_address(cls, value: str) -> str:
        """An address of this machine to listen on (0.0.0.0 for all of them): binding any other fails only
        once the webhook server starts, after the bot has told Telegram where to send."""
        try:
            with socket.socket(socket.AF_INET6 if ":" in value else socket.AF_INET) as probe:
                probe.bind((value, 0))
        except OSError as exc:
            raise ValueError(f"{value!r} is not an address of this machine to listen on "
                             f"({exc.strerror or exc}); 127.0.0.1 behind a proxy, 0.0.0.0 for every address") from None
        return value

    @field_validator("data_dir", "backup_dir")
    @classmethod
    def _folder(cls, value: Path) -> Path:
        if value.exists() and not value.is_dir():
            raise ValueError(f"{value} is a file, not a folder")
        return value

    @field_validator("admin_ids", "important_keywords", mode="before")
    @classmethod
    def _csv_list(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("telegram_bot_token", "webhook_secret", "llm_api_key", "embedding_api_key", "dida_client_secret",
                     "dida_token_key")
    @classmethod
    def _blank_secret_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        # .env.example leaves the keys blank ("LLM_API_KEY="): a blank key is no key, so every check of
        # whether one is set agrees with ``require`` (an operator command must not build a client for it).
        return value if value is not None and value.get_secret_value().strip() else None

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown timezone {value!r}") from exc
        return value

    @field_validator("telegram_api_base", "llm_base_url", "embedding_base_url", "dida_auth_base", "dida_api_base")
    @classmethod
    def _base_url(cls, value: str) -> str:
        """An http(s) URL with a host, or empty where empty means off: "api.deepseek.com" or "localhost:11434/v1"
        would otherwise fail every request later (as a traceback, or an apology for every reply)."""
        value = value.strip().rstrip("/")
        if value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"must be an http(s) URL with a host (https://...), not {value!r}")
        return value

    @model_validator(mode="after")
    def _extract_range(self) -> Settings:
        # The chat draws the next extraction point with randint(min, max), which fails on an empty range.
        if self.extract_every_min > self.extract_every_max:
            raise ValueError(
                f"EXTRACT_EVERY_MIN ({self.extract_every_min}) must not exceed "
                f"EXTRACT_EVERY_MAX ({self.extract_every_max})"
            )
        return self

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url(cls, value: str) -> str:
        value = value.strip()
        if value and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname):
            raise ValueError(f"must be an http(s) URL Telegram can reach, not {value!r}")
        return value

    @field_validator("webapp_url")
    @classmethod
    def _webapp_url(cls, value: str) -> str:
        # Telegram opens a Mini App only over HTTPS.
        value = value.strip()
        if value and (urlsplit(value).scheme != "https" or not urlsplit(value).hostname):
            raise ValueError(f"must be the board's public https:// address (Telegram opens no other), not {value!r}")
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        # Telegram's own rule for secret_token; checked here so a bad one stops the start, not every update.
        if value is not None and value.get_secret_value() and not WEBHOOK_SECRET_RE.fullmatch(value.get_secret_value()):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
        return value

    @model_validator(mode="after")
    def _one_embedding_backend(self) -> Settings:
        if self.embedding_base_url and self.embedding_local_model:
            raise ValueError("set either EMBEDDING_BASE_URL or EMBEDDING_LOCAL_MODEL, not both")
        if self.embedding_base_url and not self.embedding_model:
            raise ValueError("EMBEDDING_BASE_URL needs EMBEDDING_MODEL (the embedding model's name)")
        return self

    @property
    def embedding_backend(self) -> Literal["openai", "local", "e5"] | None:
        """Which embedding backend semantic recall uses: a configured endpoint or folder first, else the
        in-process model (whether it is installed is the assembly's question); None: keywords only."""
        if self.embedding_base_url:
            return "openai"
        if self.embedding_local_model:
            return "local"
        return None if self.embeddings == "off" else "e5"

    @property
    def webhook_path(self) -> str:
        """The path of WEBHOOK_URL, which the bot serves (the proxy forwards it unchanged)."""
        return urlsplit(self.webhook_url).path or "/"

    @property
    def webapp_path(self) -> str:
        """Where the board's page is served: WEBAPP_URL's path (``/board`` when it names none)."""
        return urlsplit(self.webapp_url).path.rstrip("/") or "/board"

    def webhook_token(self) -> str:
        """The secret Telegram sends with every update: WEBHOOK_SECRET, or one derived from the bot token, so
        every process of one bot agrees on it without another setting and nobody without the token can guess it."""
        if self.webhook_secret is not None and self.webhook_secret.get_secret_value():
            return self.webhook_secret.get_secret_value()
        assert self.telegram_bot_token is not None
        token = self.telegram_bot_token.get_secret_value().encode()
        return hmac.new(token, b"companion-webhook", hashlib.sha256).hexdigest()

    @property
    def dida_enabled(self) -> bool:
        """Whether the Dida365 kanban is offered: the operator registered an app and set its three keys."""
        return bool(self.dida_client_id and _is_set(self.dida_client_secret) and self.dida_redirect_uri)

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def database(self) -> str:
        """The store's URL: ``DATABASE_URL``, or SQLite in ``DATA_DIR/memory.sqlite3``."""
        return self.database_url or f"{SQLITE_PREFIX}{self.data_dir / DB_NAME}"

    @property
    def shared_database(self) -> bool:
        """A server database several processes use at once (SQLite is one process's file)."""
        return self.database.startswith(("postgresql://", "postgres://"))

    @property
    def db_path(self) -> Path:
        """The SQLite file the store lives in (and beside which operator commands take their lock); for a
        store of another kind, where that file would be."""
        if self.database.startswith(SQLITE_PREFIX) and len(self.database) > len(SQLITE_PREFIX):
            return Path(self.database[len(SQLITE_PREFIX):])
        return self.data_dir / DB_NAME

    @property
    def spool_dir(self) -> Path:
        """Where each process keeps the turns the database could not take (``companion.storage.spool``)."""
        return self.data_dir / "spool"

    @property
    def llm_key_needed(self) -> bool:
        """DeepSeek's own API needs a key; a server of one's own (LLM_BASE_URL) may not ask for one."""
        return self.llm_base_url == DEFAULT_LLM_BASE_URL

    def require(self, *names: str) -> None:
        """Raise one clear ConfigError, one line, naming every required key that is unset and where it comes from."""
        missing = [name.upper() for name in names if not _is_set(getattr(self, name))]
        if not missing:
            return
        keys = " and ".join(missing) if len(missing) == 2 else ", ".join(missing)
        what = ("setting", "it") if len(missing) == 1 else ("settings", "them")
        sources = "; ".join(f"{key}: {WHERE_TO_GET[key]}" for key in missing if key in WHERE_TO_GET)
        raise ConfigError(
            f"Missing required {what[0]} {keys}: set {what[1]} in .env or the environment (see .env.example)."
            + (f" {sources}." if sources else "")
        )

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        value = value.strip()
        if value and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"must be a redis://, rediss:// or unix:// URL, not {_shown_url(value)!r}")
        return value

    def require_for_workers(self, *, worker: bool) -> None:
        """One line when several processes are asked for (WORKERS > 1, or ``bot.py worker``) without what
        they share: the queue (REDIS_URL) and a server database (SQLite allows one process at a time)."""
        if self.workers == 1 and not worker:
            return
        what = "bot.py worker" if worker else f"WORKERS={self.workers}"
        if not self.redis_url:
            raise ConfigError(f"{what} needs REDIS_URL: the workers share the updates through Redis.")
        if not self.shared_database:
            raise ConfigError(f"{what} needs a shared database (DATABASE_URL=postgresql://...): "
                              "SQLite is used by one process at a time; run WORKERS=1 with SQLite.")

    def require_for_chat(self, *, telegram: bool) -> None:
        """What chatting needs, in one line: LLM_API_KEY unless LLM_BASE_URL names another (possibly
        keyless, local) server, and TELEGRAM_BOT_TOKEN for the bot (not for the console)."""
        names = ["telegram_bot_token"] if telegram else []
        self.require(*names, *(["llm_api_key"] if self.llm_key_needed else []))

    @property
    def llm_key(self) -> str:
        """The key sent to the LLM; a keyless local server still gets a non-empty one (the SDK insists)."""
        if self.llm_api_key is not None and _is_set(self.llm_api_key):
            return self.llm_api_key.get_secret_value().strip()
        return "" if self.llm_key_needed else LOCAL_KEY


def _shown_url(url: str) -> str:
    """A URL without its password, for a message."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{parts.path}" if parts.password else url


def _is_set(value: object) -> bool:
    if isinstance(value, SecretStr):
        return bool(value.get_secret_value().strip())
    return value is not None and value != ""


def _problem(loc: tuple[int | str, ...], msg: str) -> str:
    # Checks across fields (a model validator) have no location; their message names the keys itself.
    where = ".".join(str(p) for p in loc).upper()
    text = " ".join(msg.split())  # one line, whatever the validator wrote
    return f"{where}: {text}" if where else text


def load_settings(base_dir: Path | None = None, **overrides: object) -> Settings:
    """Build settings, turning pydantic's multi-line report into one ConfigError line per problem.

    With ``base_dir`` (bot.py passes the project folder), ``.env`` is read from that folder and relative
    ``DATA_DIR`` / ``BACKUP_DIR`` are resolved against it, so the bot finds the same files whatever
    folder it is started from. Without it, both are relative to the working directory."""
    if base_dir is not None:
        overrides.setdefault("_env_file", base_dir / ".env")
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(_problem(err["loc"], err["msg"]) for err in exc.errors())
        raise ConfigError(f"Invalid setting {problems}") from None
    except SettingsError as exc:  # a value pydantic-settings could not even decode
        raise ConfigError(f"Invalid setting: {' '.join(str(exc).split())}") from None
    if base_dir is None:
        return settings
    url = settings.database_url
    if url.startswith(SQLITE_PREFIX) and len(url) > len(SQLITE_PREFIX):  # a relative file counts from there too
        url = f"{SQLITE_PREFIX}{base_dir / Path(url[len(SQLITE_PREFIX):]).expanduser()}"
    return settings.model_copy(
        update={"data_dir": base_dir / settings.data_dir.expanduser(),
                "backup_dir": base_dir / settings.backup_dir.expanduser(), "database_url": url}
    )
