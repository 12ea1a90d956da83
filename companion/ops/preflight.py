"""Start-up checks that need no heavy library: the bot token's shape, then one call to Telegram (getMe) and
one to the LLM (list the models), side by side. aiogram and openai take seconds of CPU to import; these
checks use the standard library, so a wrong token or key, or no route, is one line within a second.

Imports only ``core`` and ``config``: it sits below the subpackages of ``companion.ops``, whose ``workers``
raise its ``StartupError``."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error  # here, not in the checks: two threads importing a submodule at once can find it half bound
import urllib.request  # ("module 'urllib' has no attribute 'request'", seen in a fresh-clone run)
from typing import TYPE_CHECKING

from companion.core.errors import CompanionError, ConfigError

if TYPE_CHECKING:
    from companion.config.settings import Settings

log = logging.getLogger(__name__)

# Each check's bound: a slow answer is not a wrong token or key, but nobody waits a minute to learn it.
CHECK_TIMEOUT_SECONDS = 10.0


class StartupError(CompanionError):
    """The bot cannot start: Telegram or the LLM refused it or cannot be reached (exit code 2)."""


def check_token_format(token: str) -> None:
    """The shape @BotFather gives (``<digits>:<letters>``), as aiogram's ``validate_token`` checks it."""
    left, sep, right = token.partition(":")
    if any(c.isspace() for c in token) or not sep or not left.isdigit() or not right:
        raise ConfigError(
            "TELEGRAM_BOT_TOKEN is malformed: expected <digits>:<letters> as @BotFather gives it"
        )


async def preflight(settings: Settings, *, telegram: bool) -> None:
    """Raise StartupError (Telegram) or ConfigError (a rejected LLM key); an LLM out of reach is only a
    warning: replies degrade to a friendly "the model is down" until it is back."""
    token = ""
    if telegram:
        assert settings.telegram_bot_token is not None
        token = settings.telegram_bot_token.get_secret_value().strip()
        check_token_format(token)
    checks = [asyncio.to_thread(_llm_problem, settings.llm_base_url, settings.llm_key)]
    if telegram:
        checks.append(asyncio.to_thread(_telegram_problem, settings.telegram_api_base, token))
    warning, *problems = await asyncio.gather(*checks)
    for problem in problems:
        if problem is not None:
            raise StartupError(problem)
    if warning is not None:
        log.warning("cannot reach the LLM at %s (%s); starting anyway", settings.llm_base_url, warning)


def _telegram_problem(base: str, token: str) -> str | None:
    # No proxy from the environment: aiogram's client does not use one either.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base}/bot{token}/getMe", timeout=CHECK_TIMEOUT_SECONDS):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            return ("Telegram rejected the token (401 Unauthorized); check TELEGRAM_BOT_TOKEN "
                    "(@BotFather in Telegram shows it: /mybots)")
        return f"the Telegram API at {base} refused getMe: {_without(_description(exc), token)}"
    except urllib.error.URLError as exc:
        return f"cannot reach the Telegram API at {base} ({_without(str(exc.reason), token)})"
    except (OSError, ValueError) as exc:  # a timeout, a reset connection, a URL that is not one
        return f"cannot reach the Telegram API at {base} ({_without(str(exc) or type(exc).__name__, token)})"


def _llm_problem(base_url: str, key: str) -> str | None:
    """None when the key is accepted (or the server has no models endpoint); a warning's text when the
    server cannot be reached; ConfigError when it rejects the key."""
    # The SDK's client takes the environment's proxy; so does this one (urllib's default opener).
    request = urllib.request.Request(f"{base_url}/models", headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=CHECK_TIMEOUT_SECONDS):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise ConfigError(
                f"the LLM rejected the API key (HTTP {exc.code}); check LLM_API_KEY "
                f"(a key from https://platform.deepseek.com, or the key of the server at LLM_BASE_URL)"
            ) from None
        if exc.code == 404:
            log.debug("the LLM server has no models endpoint; the key is checked by the first call")
            return None
        return f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        return _without(str(exc.reason), key)
    except (OSError, ValueError) as exc:
        return _without(str(exc) or type(exc).__name__, key)


def _description(exc: Exception) -> str:
    """Telegram's own words for a refusal (``{"description": ...}``), else the HTTP status."""
    code = getattr(exc, "code", "?")
    try:
        body = json.loads(exc.read())  # type: ignore[attr-defined]
        return f"HTTP {code}: {' '.join(str(body['description']).split())}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"HTTP {code}"


def _without(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text
