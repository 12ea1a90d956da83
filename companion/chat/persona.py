"""The companion's persona: the system prompt of a reply call, built from the memory context the engine
hands over as data. Persona and prompt wording are chat concerns; the engine never renders them."""

from __future__ import annotations

from datetime import datetime, tzinfo

import prompts
from companion.core.timeutil import show
from memory import MemoryContext


def render_system_prompt(context: MemoryContext, now: datetime, tz: tzinfo) -> str:
    dynamic = "".join(f"- {line}\n" for line in context.dynamic)
    memories = "".join(f"- {r.memory.event}\n" for r in context.recalled)
    memories += "".join(f"- （今天刚知道）{line}\n" for line in context.recent)
    if context.instructions:
        memories += "用户对聊天方式的要求（请照做）：\n" + "".join(f"- {line}\n" for line in context.instructions)
    return prompts.render(
        "system",
        now_local=show(now, tz),
        core_profile=context.core or "（还不太了解）",
        dynamic_block=f"\n用户最近的情况（和当前话题有关）：\n{dynamic}" if dynamic else "",
        memory_block=f"\n可能相关的记忆（仅供参考）：\n{memories}" if memories else "",
    )
