"""The memory board in a real browser: ``python bot.py`` serves it (polling, WEBAPP_PORT) against the fake
Telegram and the fake model, and Debian's headless Chromium, driven through its chromedriver, opens it as a
signed user, drags a card to another tier, edits one, forgets one and moves one with the keyboard; the
engine's state and the chat's receipts are checked after each, and a memory saved in the chat meanwhile
appears on the open page without a reload. A screenshot of each state is kept in ``.artifacts/board/``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from companion.chat import texts
from companion.core.models import MemoryDraft, MemoryType, Scope, Status, Tier, Validity
from companion.core.timeutil import utcnow
from companion.storage.factory import open_store, sqlite_url
from tests.fakes import FakeLLM, FakeTelegram
from tests.miniapp import signed_init_data, web_app_stand_in
from tests.process import ROOT, bot_env, start_bot, stop_bot
from tests.servers import free_port, require
from tests.support import Clock, close_rig, make_settings, open_rig

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SHOTS = ROOT / ".artifacts" / "board"
USER = 8101
WEBAPP_URL = "https://board.example/board"


def missing_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        return f"selenium is not installed ({exc})"
    absent = [p for p in (CHROMIUM, DRIVER) if not Path(p).exists() and not shutil.which(Path(p).name)]
    return f"not installed: {', '.join(absent)} (apt-get install chromium chromium-driver)" if absent else None


@pytest.fixture
def browser() -> Iterator[Any]:
    require(missing_browser(), "Chromium", "the browser test needs Debian's chromium and chromium-driver "
                                            "(apt-get install chromium chromium-driver); CI=true makes this fail")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # A phone's viewport; Telegram's script cannot load (no internet): its stand-in is in the page instead.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=412,860",
                 "--host-resolver-rules=MAP telegram.org ~NOTFOUND, MAP *.telegram.org ~NOTFOUND", "--lang=zh-CN"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console, read at the end
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


async def until(check: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Poll ``check`` (a blocking browser call, run in a thread) until it is truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await asyncio.to_thread(check)
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def fill(tmp_path: Path) -> dict[str, int]:
    """The user's memories before the bot starts, written through the engine on the bot's database file."""
    async with FakeLLM() as llm:
        rig = await open_rig(llm, make_settings(tmp_path), Clock(utcnow()))  # the bot runs on the real clock
        handles: dict[str, int] = {}
        for words, tier, importance in (("养了一只叫团子的猫", Tier.MEDIUM, 70.0), ("在准备跳槽", Tier.MEDIUM, 55.0),
                                        ("对花生过敏", Tier.LONG, 95.0), ("最近在追一部韩剧", Tier.SHORT, 25.0)):
            draft = MemoryDraft(event=words, keywords=[], importance=importance, tier=tier, type=MemoryType.FACT,
                                validity=Validity.PERMANENT if tier is Tier.LONG else Validity.DAYS_30)
            handles[words] = (await rig.engine.save(Scope(USER), draft, rig.clock())).memory.id
        await rig.engine.set_active(Scope(USER), True, rig.clock())
        await close_rig(rig)
    return handles


def shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def card(driver: Any, words: str) -> Any:
    """The card with these words, or None; the page re-renders as it polls, so a card read stale is read again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(5):
        try:
            return next((node for node in driver.find_elements(By.CSS_SELECTOR, ".card") if words in node.text), None)
        except StaleElementReferenceException:
            continue
    return None


def column_of(driver: Any, words: str) -> str | None:
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        found = card(driver, words)
        return None if found is None else str(found.find_element("xpath", "./ancestor::section").get_attribute(
            "data-column"))
    except StaleElementReferenceException:
        return None


async def test_a_user_drags_edits_and_forgets_on_the_board(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    handles = await fill(tmp_path)
    port = free_port()
    async with FakeTelegram() as tg, FakeLLM() as llm:
        env = bot_env(tg, llm, tmp_path, WEBAPP_URL=WEBAPP_URL, WEBAPP_PORT=str(port))
        proc = await start_bot(env, tmp_path)
        try:
            # The chat side: /board answers with the button that opens the Mini App.
            tg.push_text(USER, "/board")
            [opened] = await tg.wait_for_messages(USER, 1, timeout=60)
            [[button]] = opened["reply_markup"]["inline_keyboard"]
            assert button["web_app"]["url"] == WEBAPP_URL
            assert "board" in [c["command"] for c in tg.commands_for({"type": "all_private_chats"}) or []]

            browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                    {"source": web_app_stand_in(signed_init_data(tg.token, USER))})
            await asyncio.to_thread(browser.get, f"http://127.0.0.1:{port}/board/")
            await until(lambda: card(browser, "团子"), what="the board's cards")
            columns = [c.get_attribute("data-column") for c in browser.find_elements(By.CSS_SELECTOR, ".column")]
            assert columns == ["short", "medium", "long", "archived"]
            assert column_of(browser, "花生") == "long" and column_of(browser, "团子") == "medium"
            await asyncio.to_thread(shot, browser, "1-loaded")

            # Drag the cat from 中期 to 长期 (pointer events, as a finger or a mouse makes them).
            target = browser.find_element(By.CSS_SELECTOR, '.column[data-column="long"]')
            chain = ActionChains(browser).click_and_hold(card(browser, "团子")).move_by_offset(10, 10)
            await asyncio.to_thread(chain.move_to_element(target).move_by_offset(0, 40).release().perform)
            await until(lambda: column_of(browser, "团子") == "long", what="the dragged card in 长期")
            await asyncio.to_thread(shot, browser, "2-dragged")

            # Edit the allergy: open the card, 编辑, new words, 保存.
            await asyncio.to_thread(card(browser, "花生").click)
            edit = next(b for b in card(browser, "花生").find_elements(By.TAG_NAME, "button") if b.text == "编辑")
            await asyncio.to_thread(edit.click)
            words = browser.find_element(By.ID, "words")
            await asyncio.to_thread(words.clear)
            await asyncio.to_thread(words.send_keys, "对花生和芒果过敏")
            await asyncio.to_thread(browser.find_element(By.ID, "save").click)
            await until(lambda: card(browser, "芒果"), what="the edited words")
            await asyncio.to_thread(shot, browser, "3-edited")

            # Forget the job search: open it, 忘掉, confirmed in Telegram's dialog.
            await asyncio.to_thread(card(browser, "跳槽").click)
            forget = next(b for b in card(browser, "跳槽").find_elements(By.TAG_NAME, "button") if b.text == "忘掉")
            await asyncio.to_thread(forget.click)
            await until(lambda: card(browser, "跳槽") is None, what="the forgotten card gone")
            await asyncio.to_thread(shot, browser, "4-forgotten")

            # The keyboard instead of a drag: focus the drama, Enter opens it, its "移到中期" button moves it.
            drama = card(browser, "韩剧")
            await asyncio.to_thread(drama.send_keys, Keys.ENTER)
            move = next(b for b in card(browser, "韩剧").find_elements(By.TAG_NAME, "button") if b.text == "移到中期")
            await asyncio.to_thread(move.send_keys, Keys.ENTER)
            await until(lambda: column_of(browser, "韩剧") == "medium", what="the card moved by keyboard")

            # Said in the chat meanwhile: on the open page within a few seconds, no reload.
            llm.set_json_reply(json.dumps({"event": "喜欢看展", "keywords": ["看展"], "type": "preference",
                                           "importance": 70, "core": False}, ensure_ascii=False))
            tg.push_text(USER, "记住：我喜欢看展")
            await until(lambda: card(browser, "看展"), timeout=20, what="a memory saved in the chat")
            await asyncio.to_thread(shot, browser, "5-live")
            await asyncio.to_thread(browser.set_window_size, 1100, 640)  # a tablet or desktop client: all four
            await asyncio.sleep(0.3)
            await asyncio.to_thread(shot, browser, "6-wide")

            console = [str(e.get("message", "")) for e in await asyncio.to_thread(browser.get_log, "browser")]
            assert not [m for m in console if "Content Security Policy" in m or "Uncaught" in m], console
            said = [m["text"] for m in tg.sent_messages(USER)]
            assert "已在记忆面板上改好：对花生和芒果过敏" in said and texts.forgotten(1) in said
        finally:
            output = await stop_bot(proc)
    assert "芒果" not in output and "跳槽" not in output, "memory text reached the log"
    store = await open_store(sqlite_url(make_settings(tmp_path).db_path))
    try:
        rows = {m.id: m for m in await store.fetch_memories(Scope(USER), set(Status))}
    finally:
        await store.close()
    assert rows[handles["养了一只叫团子的猫"]].tier is Tier.LONG
    assert rows[handles["对花生过敏"]].event == "对花生和芒果过敏"
    gone = rows[handles["在准备跳槽"]]
    assert (gone.status, gone.event) == (Status.FORGOTTEN, "")
    assert rows[handles["最近在追一部韩剧"]].tier is Tier.MEDIUM
    assert os.listdir(SHOTS)
