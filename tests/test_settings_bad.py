"""Every setting with a bad value stops the start with one line that names it, exit 2 and no traceback. Each setting
is either given a bad value here or listed as free text (any text is a value; what it names is checked where it is
used), so a new setting has to be placed in one or the other."""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import get_args, get_origin
from unittest import mock

import pytest

from companion.config.settings import Settings, load_settings
from companion.core.errors import ConfigError
from tests.process import clean_env, run_cli

# Any text is a value: names, keys and URLs, checked where they are used (the token's format at start-up, the
# database's folder when it is opened, the keys by the services that take them).
FREE = frozenset({
    "telegram_bot_token", "llm_api_key", "embedding_api_key", "dida_client_secret", "dida_token_key",
    "redis_prefix", "llm_model", "embedding_model", "embedding_local_model", "dida_client_id",
    "dida_redirect_uri", "database_url", "important_keywords",
})
# The values a type alone does not refuse.
NAMED = {
    "telegram_api_base": "api.telegram.org", "llm_base_url": "api.deepseek.com", "embedding_base_url": "localhost:8080",
    "dida_auth_base": "ftp://dida365.com", "dida_api_base": "https://", "webhook_url": "example.com/hook",
    "webhook_secret": "has spaces", "redis_url": "localhost:6379", "timezone": "Mars/Phobos", "admin_ids": "1,abc",
    "review_hours": "21,9", "log_level": "LOUD", "webhook_listen": "8.8.8.8", "data_dir": "/etc/passwd",
    "backup_dir": "/etc/passwd", "webapp_url": "http://board.example/board",
}


def bad_value(name: str) -> str:
    if name in NAMED:
        return NAMED[name]
    annotation = Settings.model_fields[name].annotation
    if get_origin(annotation) is typing.Literal:
        return "nonsense"
    kinds = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    kind = kinds[0]
    if kind is bool:
        return "maybe"
    if kind is int or kind is float:
        return "many"
    if kind.__name__ == "time":
        return "25:99"
    raise AssertionError(f"{name}: give it a bad value in NAMED or list it in FREE")


CHECKED = sorted(set(Settings.model_fields) - FREE)


def test_every_setting_is_checked_or_free_text() -> None:
    assert set(Settings.model_fields) >= FREE, sorted(FREE - set(Settings.model_fields))
    for name in CHECKED:
        bad_value(name)  # raises for a setting placed nowhere


@pytest.mark.parametrize("name", CHECKED)
def test_a_bad_value_is_one_line_naming_the_setting(name: str) -> None:
    key = name.upper()
    with mock.patch.dict(os.environ, {key: bad_value(name)}, clear=True), pytest.raises(ConfigError) as caught:
        load_settings(None, _env_file=None)
    message = str(caught.value)
    assert "\n" not in message and key in message, message


@pytest.mark.parametrize(("key", "value"), [("LLM_BASE_URL", "api.deepseek.com"), ("REVIEW_HOURS", "21,9"),
                                            ("EMBEDDINGS", "maybe"), ("LOG_LEVEL", "LOUD"),
                                            ("WEBHOOK_LISTEN", "8.8.8.8"), ("DATA_DIR", "/etc/passwd")])
async def test_the_bot_stops_with_one_line_and_exit_2(tmp_path: Path, key: str, value: str) -> None:
    env = clean_env() | {"DATA_DIR": str(tmp_path / "data"), "TELEGRAM_BOT_TOKEN": "123:abc", "LLM_API_KEY": "sk-x",
                         key: value}
    code, out, err = await run_cli(env, tmp_path, "console")
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in err, err
