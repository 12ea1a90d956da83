"""Logging setup. Memory text and secrets are only ever logged at DEBUG."""

from __future__ import annotations

import logging


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx/aiohttp at INFO would print request URLs, which for Telegram contain the bot token.
    # matplotlib and its font manager write several INFO lines per /mem_stats chart: third-party chatter.
    for noisy in ("httpx", "httpx2", "openai", "aiogram.event", "apscheduler", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    # Its "findfont: Failed to find font weight normal for WenQuanYi Zen Hei" warning comes with every chart
    # where the CJK font has one weight (500, Debian's fonts-wqy-zenhei): the chart is drawn all the same.
    logging.getLogger("matplotlib.font_manager").setLevel(max(logging.ERROR, logging.getLogger().level))
