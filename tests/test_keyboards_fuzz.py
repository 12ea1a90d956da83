"""Every keyboard builder, fuzzed with long CJK and arbitrary text (hypothesis): each button's callback
data fits Telegram's 64 bytes and parses back to what was packed; and ``/memories`` with a long keyword
and more than one page of matches answers with its pages (it crashed into the generic error)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from aiogram.filters.callback_data import CallbackData
from aiogram.types import InlineKeyboardMarkup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Status, Tier, Validity
from companion.core.text import sendable
from companion.core.tiers import Action, Suggestion
from handlers import keyboards
from handlers.keyboards import (
    CALLBACK_BYTES,
    ForgetCB,
    GroupForgetCB,
    GroupReviewCB,
    MemoryCB,
    PageCB,
    ReviewCB,
    StartCB,
    page_query,
)
from tests.support import USER, Live

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=max(EXAMPLES, 50), deadline=None, derandomize=EXAMPLES < 100,
                suppress_health_check=[HealthCheck.too_slow])
T0 = datetime(2025, 12, 1, tzinfo=UTC)
CJK = st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=1, max_size=300)
ODD = st.sampled_from([":" * 100, "长" * 40, "😀" * 40, "a:b:c" * 20, "坏\ud800\x00" * 20])
TEXT = st.one_of(CJK, st.text(max_size=300), ODD)
HANDLE = st.integers(min_value=1, max_value=2**53)
CHAT = st.integers(min_value=-(10**13), max_value=-1)
USER_ID = st.integers(min_value=1, max_value=2**40)
PARSERS: tuple[type[CallbackData], ...] = (GroupForgetCB, GroupReviewCB, MemoryCB, PageCB, ForgetCB, ReviewCB, StartCB)


def memory(handle: int, event: str, tier: Tier, status: Status = Status.ACTIVE) -> Memory:
    return Memory(id=handle, event=event, keywords=[event[:8]], importance=60.0, created_at=T0,
                  validity=Validity.DAYS_30, last_mentioned_at=None, updated_at=T0, expires_at=None,
                  type=MemoryType.FACT, origin=Origin.EXTRACTED, mention_count=0, last_decay_at=T0,
                  status=status, tier=tier)


def check(markup: InlineKeyboardMarkup) -> None:
    for row in markup.inline_keyboard:
        for button in row:
            data = button.callback_data
            assert data is not None and len(data.encode()) <= CALLBACK_BYTES, data
            prefix = data.split(":", 1)[0]
            parser = next(p for p in PARSERS if p.__prefix__ == prefix)
            assert parser.unpack(data).pack() == data


STATUS = st.sampled_from([Status.ACTIVE, Status.ARCHIVED])
MEMORIES = st.lists(st.tuples(HANDLE, TEXT, st.sampled_from(list(Tier)), STATUS), min_size=1, max_size=5)


@FUZZ
@given(items=MEMORIES, page=st.integers(min_value=0, max_value=9998), query=TEXT, archived=st.booleans(),
       chat=CHAT, user=USER_ID)
def test_every_keyboard_fits_and_parses_back(items: list[tuple[int, str, Tier, Status]], page: int, query: str,
                                             archived: bool, chat: int, user: int) -> None:
    shown = [memory(*item) for item in items]
    group = Scope(user, chat)
    check(keyboards.memory_page(shown, page, page + 2, page_query(query), archived))
    check(keyboards.receipt(shown[0]))
    for scope in (None, Scope(user), group):
        check(keyboards.forget_choices(shown, scope))
        check(keyboards.forget_all(len(shown) * 1000, scope))
        check(keyboards.review([(m, Suggestion(Action.KEEP, "理由" * 50)) for m in shown], scope))
    check(keyboards.undo(ReviewCB(action="undo", handle=shown[0].id, at=2**31, tier="medium", review=2**31,
                                  was="promote")))
    check(keyboards.start_companion())


@FUZZ
@given(query=TEXT)
def test_page_query_is_a_prefix_within_budget(query: str) -> None:
    cut = page_query(query)
    clean = sendable(query).replace(":", " ")
    assert clean.strip().startswith(cut) or clean.startswith(cut)
    assert len(PageCB(page=9999, query=cut, archived=True).pack().encode()) <= CALLBACK_BYTES


async def test_memories_with_a_long_keyword_and_many_matches(live: Live) -> None:
    keyword = "我最喜欢的那家很远的火锅店旁边的小卖部里卖的冰镇酸梅汤真的太好喝了每次都要喝两瓶" [:40]
    drafts = [MemoryDraft(f"{keyword} 第{i}次", [keyword], 50.0 + i, validity=Validity.DAYS_30) for i in range(8)]
    await live.rig.engine.remember(Scope(USER), drafts, live.rig.clock())
    text = await live.say(f"/memories {keyword}", 1)
    assert "（第 1/2 页）" in text, text
    page = live.tg.sent_messages(USER)[-1]
    await live.press(USER, page, "下一页", 1)
    await live.tg.wait_for_edit(USER, int(page["message_id"]), "（第 2/2 页）")
