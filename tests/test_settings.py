"""Settings from the environment: defaults, comma lists, one-line config errors, secrets kept secret."""

from __future__ import annotations

from datetime import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companion.config.settings import DEFAULT_IMPORTANT_KEYWORDS, LOCAL_KEY, Settings, load_settings
from companion.core.errors import ConfigError

TOKEN = "123456:AAE-secret-bot-token"
API_KEY = "sk-very-secret-api-key"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer .env and no exported setting may leak into these tests."""
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def test_defaults() -> None:
    settings = load_settings(_env_file=None)
    assert settings.telegram_bot_token is None
    assert settings.llm_api_key is None
    assert settings.llm_base_url == "https://api.deepseek.com"
    assert settings.tz == ZoneInfo("Asia/Shanghai")
    assert settings.db_path == Path("data") / "memory.sqlite3"
    assert settings.admin_ids == []
    assert settings.important_keywords == list(DEFAULT_IMPORTANT_KEYWORDS)
    assert (settings.recall_max, settings.recall_min_importance, settings.recall_cooldown_turns) == (2, 50.0, 5)
    assert settings.recall_max_rate == 0.2
    assert (settings.decay_time, settings.backup_time) == (time(3, 0), time(3, 30))


def test_reads_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("LLM_API_KEY", API_KEY)
    monkeypatch.setenv("LLM_BASE_URL", "http://localhost:8080/v1/")
    monkeypatch.setenv("TIMEZONE", "Europe/Berlin")
    monkeypatch.setenv("DATA_DIR", "/srv/bot")
    monkeypatch.setenv("RECALL_MAX", "3")
    monkeypatch.setenv("RECALL_MIN_MATCH", "0.5")
    monkeypatch.setenv("DECAY_TIME", "04:15")
    settings = load_settings(_env_file=None)
    assert settings.telegram_bot_token is not None
    assert settings.telegram_bot_token.get_secret_value() == TOKEN
    assert settings.llm_base_url == "http://localhost:8080/v1"  # trailing slash dropped
    assert settings.tz == ZoneInfo("Europe/Berlin")
    assert settings.db_path == Path("/srv/bot/memory.sqlite3")
    assert (settings.recall_max, settings.recall_min_match) == (3, 0.5)
    assert settings.decay_time == time(4, 15)


def test_reads_dot_env_in_the_working_directory_and_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=from-dot-env\nRECALL_MAX=4\nADMIN_IDS=7,8\n", encoding="utf-8")
    monkeypatch.setenv("RECALL_MAX", "1")
    settings = load_settings()
    assert (settings.llm_model, settings.recall_max, settings.admin_ids) == ("from-dot-env", 1, [7, 8])
    assert load_settings(_env_file=None).llm_model == "deepseek-chat"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1,2,3", [1, 2, 3]), (" 1 , 2 ,3 ", [1, 2, 3]), ("1，2", [1, 2]), ("42", [42]), ("", []), (",,", [])],
)
def test_admin_ids_comma_list(monkeypatch: pytest.MonkeyPatch, raw: str, expected: list[int]) -> None:
    monkeypatch.setenv("ADMIN_IDS", raw)
    assert load_settings(_env_file=None).admin_ids == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("生病,住院", ["生病", "住院"]), (" 生病 ，  住院,,手术 ", ["生病", "住院", "手术"]), ("", [])],
)
def test_important_keywords_comma_list(monkeypatch: pytest.MonkeyPatch, raw: str, expected: list[str]) -> None:
    monkeypatch.setenv("IMPORTANT_KEYWORDS", raw)
    assert load_settings(_env_file=None).important_keywords == expected


def one_line_error(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("zone", ["Mars/Olympus", "Asia/Shanghai ", "../etc/passwd", "/etc/localtime", ""])
def test_bad_timezone_is_one_config_error_line(monkeypatch: pytest.MonkeyPatch, zone: str) -> None:
    message = one_line_error(monkeypatch, TIMEZONE=zone)
    assert message.startswith("Invalid setting TIMEZONE:")
    assert "unknown timezone" in message


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"ADMIN_IDS": "1,abc"}, ["ADMIN_IDS"]),
        ({"RECALL_MAX": "-1"}, ["RECALL_MAX"]),
        ({"RECALL_MAX_RATE": "1.5"}, ["RECALL_MAX_RATE"]),
        ({"LLM_TIMEOUT_SECONDS": "0"}, ["LLM_TIMEOUT_SECONDS"]),
        ({"BACKUP_TIME": "25:99"}, ["BACKUP_TIME"]),
        ({"TIMEZONE": "Nowhere/City", "HISTORY_TURNS": "0"}, ["TIMEZONE", "HISTORY_TURNS"]),
        ({"EXTRACT_EVERY_MIN": "20", "EXTRACT_EVERY_MAX": "10"}, ["EXTRACT_EVERY_MIN", "EXTRACT_EVERY_MAX"]),
    ],
)
def test_invalid_values_name_their_keys_on_one_line(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], names: list[str]
) -> None:
    message = one_line_error(monkeypatch, **env)
    for name in names:
        assert name in message


def test_equal_extraction_bounds_are_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXTRACT_EVERY_MIN", "5")
    monkeypatch.setenv("EXTRACT_EVERY_MAX", "5")
    settings = load_settings(_env_file=None)
    assert (settings.extract_every_min, settings.extract_every_max) == (5, 5)


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, ["TELEGRAM_BOT_TOKEN", "LLM_API_KEY"]),
        ({"TELEGRAM_BOT_TOKEN": TOKEN}, ["LLM_API_KEY"]),
        ({"LLM_API_KEY": API_KEY}, ["TELEGRAM_BOT_TOKEN"]),
        ({"TELEGRAM_BOT_TOKEN": "   ", "LLM_API_KEY": API_KEY}, ["TELEGRAM_BOT_TOKEN"]),
        ({"TELEGRAM_BOT_TOKEN": "", "LLM_API_KEY": ""}, ["TELEGRAM_BOT_TOKEN", "LLM_API_KEY"]),
    ],
)
def test_require_names_exactly_the_missing_keys(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], missing: list[str]
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(_env_file=None)
    with pytest.raises(ConfigError) as caught:
        settings.require("telegram_bot_token", "llm_api_key")
    message = str(caught.value)
    assert "\n" not in message
    named = [key for key in ("TELEGRAM_BOT_TOKEN", "LLM_API_KEY") if key in message]
    assert named == missing
    if len(missing) == 1:
        assert f"Missing required setting {missing[0]}: set it in .env" in message
    else:
        assert f"Missing required settings {' and '.join(missing)}: set them in .env" in message
    # Where each one comes from, in the same line.
    assert ("@BotFather" in message) == ("TELEGRAM_BOT_TOKEN" in missing)
    assert ("https://platform.deepseek.com" in message) == ("LLM_API_KEY" in missing)


def test_require_passes_when_everything_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("LLM_API_KEY", API_KEY)
    settings = load_settings(_env_file=None)
    settings.require("telegram_bot_token", "llm_api_key")
    settings.require()  # nothing asked, nothing missing


@pytest.mark.parametrize(
    ("env", "telegram", "missing"),
    [
        ({}, True, ["TELEGRAM_BOT_TOKEN", "LLM_API_KEY"]),
        ({}, False, ["LLM_API_KEY"]),  # the console needs no Telegram token
        ({"LLM_BASE_URL": "http://localhost:11434/v1"}, True, ["TELEGRAM_BOT_TOKEN"]),
        ({"LLM_BASE_URL": "http://localhost:11434/v1"}, False, []),  # a local server: no key at all
        ({"LLM_API_KEY": API_KEY}, False, []),
        ({"LLM_API_KEY": API_KEY, "TELEGRAM_BOT_TOKEN": TOKEN}, True, []),
    ],
    ids=["bot-nothing-set", "console-nothing-set", "bot-local-llm", "console-local-llm", "console-key",
         "bot-everything"],
)
def test_chat_requires_the_token_only_for_telegram_and_the_key_only_for_deepseek(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], telegram: bool, missing: list[str]
) -> None:
    for key in ("TELEGRAM_BOT_TOKEN", "LLM_API_KEY", "LLM_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(_env_file=None)
    if not missing:
        settings.require_for_chat(telegram=telegram)
        return
    with pytest.raises(ConfigError) as caught:
        settings.require_for_chat(telegram=telegram)
    assert [key for key in ("TELEGRAM_BOT_TOKEN", "LLM_API_KEY") if key in str(caught.value).split(":")[0]] == missing


@pytest.mark.parametrize(
    ("env", "sent"),
    [
        ({"LLM_API_KEY": API_KEY}, API_KEY),
        ({"LLM_API_KEY": API_KEY, "LLM_BASE_URL": "http://127.0.0.1:8080/v1"}, API_KEY),
        ({"LLM_BASE_URL": "http://127.0.0.1:8080/v1"}, LOCAL_KEY),  # the SDK insists on a non-empty key
        ({"LLM_API_KEY": "  ", "LLM_BASE_URL": "http://127.0.0.1:8080/v1"}, LOCAL_KEY),
    ],
)
def test_the_key_sent_to_a_local_server_is_never_empty(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], sent: str
) -> None:
    monkeypatch.delenv("LLM_API_KEY", raising=False)
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert load_settings(_env_file=None).llm_key == sent


def test_secrets_never_show(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("LLM_API_KEY", API_KEY)
    settings = load_settings(_env_file=None)
    assert settings.llm_api_key is not None and settings.telegram_bot_token is not None
    shown = [repr(settings), str(settings), repr(settings.llm_api_key), str(settings.llm_api_key),
             f"{settings.telegram_bot_token}", str(settings.model_dump())]
    for text in shown:
        assert API_KEY not in text
        assert TOKEN not in text
    assert "**********" in repr(settings.llm_api_key)
    assert settings.llm_api_key.get_secret_value() == API_KEY


def test_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_MAX", "5")
    assert load_settings(_env_file=None, recall_max=1).recall_max == 1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("data", "project/data"), ("./var/db", "project/var/db"), ("../shared", "project/../shared"),
        ("/abs/db", "/abs/db"),
    ],
)
def test_relative_folders_count_from_the_base_folder_whatever_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: str, expected: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text(f"DATA_DIR={raw}\nLLM_MODEL=from-project-env\n", encoding="utf-8")
    (tmp_path / ".env").write_text("LLM_MODEL=from-working-folder\n", encoding="utf-8")
    monkeypatch.setenv("BACKUP_DIR", "bk")
    settings = load_settings(project)
    assert settings.llm_model == "from-project-env", ".env is read from the base folder, not the working one"
    assert settings.data_dir == (tmp_path / expected if not expected.startswith("/") else Path(expected))
    assert settings.backup_dir == project / "bk"
    assert settings.db_path == settings.data_dir / "memory.sqlite3"
