"""A user's memories as a terminal table, for operators."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import tzinfo

import pandas as pd

from companion.core.models import Memory
from companion.core.timeutil import show


def memories_table(memories: Sequence[Memory], tz: tzinfo) -> str:
    frame = pd.DataFrame(
        {
            "id": [m.id for m in memories],
            "事件": [m.event for m in memories],
            "关键词": [",".join(m.keywords) for m in memories],
            "重要程度": [round(m.importance, 1) for m in memories],
            "创建时间": [show(m.created_at, tz) for m in memories],
            "有效期": [m.validity.value for m in memories],
            "最后提及时间": [show(m.last_mentioned_at, tz) for m in memories],
            "类型": [m.type.value for m in memories],
            "提及次数": [m.mention_count for m in memories],
        }
    )
    return frame.to_string(index=False)
