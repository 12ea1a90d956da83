"""Telegram's side of a Mini App, for the board's tests: init data signed as Telegram signs it (the bot token's
HMAC over the sorted fields, https://core.telegram.org/bots/webapps#validating-data-received-via-the-web-app)
and the stand-in for Telegram's Web App script that a browser test puts in the page."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode


def signed_init_data(token: str, user_id: int, *, auth_date: float | None = None, first_name: str = "测试") -> str:
    fields = {
        "query_id": f"AAH{user_id}",
        "user": json.dumps({"id": user_id, "first_name": first_name, "language_code": "zh-hans"},
                           ensure_ascii=False, separators=(",", ":")),
        "auth_date": str(int(time.time() if auth_date is None else auth_date)),
    }
    check = "\n".join(f"{k}={v}" for k, v in sorted(fields.items()))
    secret = hmac.new(b"WebAppData", token.encode(), hashlib.sha256).digest()
    fields["hash"] = hmac.new(secret, check.encode(), hashlib.sha256).hexdigest()
    return urlencode(fields)


def web_app_stand_in(init_data: str) -> str:
    """``window.Telegram.WebApp`` as the page uses it, defined before the page's scripts run (Telegram's own
    script is not loaded in tests: no internet). ``showConfirm`` says yes."""
    web_app = ("{initData: INIT, ready() {}, expand() {}, themeParams: {},"
               " showConfirm(text, done) { window.__confirmed = text; done(true); }}")
    return "window.Telegram = {WebApp: " + web_app.replace("INIT", json.dumps(init_data)) + "};"
