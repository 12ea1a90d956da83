"""Unrelated Chinese chit-chat used to pad MemDaily scopes to a realistic number of candidates.

Two sources: DuLeMon's sentences (real chit-chat, but persona-style facts) and synthetic small talk
built from templates. MemDaily asks about the user's relatives and colleagues, events they will attend,
and the items and places they use, so any sentence on those subjects could contradict a trajectory
(DuLeMon has "我父亲以前是警察"; MemDaily asks for 父亲's job): such sentences are filtered out.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence

# Substrings naming MemDaily's subjects. Single characters are deliberate: 舅 covers 舅舅/舅妈/小舅子.
MEMDAILY_SUBJECTS: tuple[str, ...] = (
    "父", "母", "爸", "妈", "哥", "姐", "弟", "妹", "叔", "婶", "舅", "姨", "姑", "爷", "奶", "外公",
    "外婆", "老公", "老婆", "妻", "丈夫", "儿子", "女儿", "上司", "同事", "下属", "领导", "老板", "手下",
    "参加", "活动", "论坛", "峰会", "研讨会", "招聘会", "音乐会", "比赛", "盛宴", "盛典",
    "手机", "鞋", "洗衣机", "美妆", "商场", "公园", "景区", "医院", "小区",
    "邮箱", "电话", "生日", "身高", "学历", "老家", "家乡", "单位", "岁",
)

_WHEN = ("今天", "早上", "傍晚", "这两天", "昨天", "周末", "刚才", "下午")
_PAIRS: tuple[tuple[str, str], ...] = (
    ("下了一场大雨", "出门忘了带伞"), ("下了一场大雨", "窗外全是雨声"),
    ("太阳特别好", "把被子拿出去晒了"), ("太阳特别好", "心情都跟着亮了"),
    ("风刮得很大", "窗户被吹得直响"), ("又闷又热", "空调开了一整天"),
    ("突然降温了", "赶紧把厚外套翻出来"), ("雾蒙蒙的", "远处的楼都看不清"),
    ("天特别蓝", "随手拍了好几张云"), ("地铁特别挤", "差点没挤上去"),
    ("路上堵车", "在车里听完了一整张专辑"), ("骑车出门", "出了一身汗"),
    ("熬夜看了会儿书", "现在一直打哈欠"), ("睡了个懒觉", "醒来精神特别好"),
    ("做了个奇怪的梦", "醒来还记得一半"), ("被蚊子咬醒好几次", "得买瓶花露水了"),
    ("把房间收拾了一遍", "找到了好久不见的耳机"), ("给绿萝浇了水", "新长出两片叶子"),
    ("楼下那只橘猫又来了", "它好像又胖了一圈"), ("泡了一壶茶", "慢慢喝了一下午"),
    ("试着自己烤面包", "结果烤得有点焦"), ("去河边散了散步", "风吹着挺舒服"),
    ("整理了一下照片", "翻到好多以前的旅行照"), ("练了半小时吉他", "手指按得有点疼"),
    ("在阳台发了会儿呆", "感觉脑子清空了"), ("学做了一道新菜", "味道居然还不错"),
)
_MEALS = ("早饭", "午饭", "晚饭", "宵夜", "中午", "晚上")
_FOODS = ("一碗牛肉面", "煎饺", "麻辣烫", "番茄炒蛋", "小笼包", "酸菜鱼", "皮蛋瘦肉粥", "烤红薯",
          "凉皮", "韭菜饺子", "炒河粉", "蛋炒饭")
_TASTES = ("味道还不错", "有点咸了", "分量挺足", "吃得好撑", "吃得很香", "下次还想吃")
_WATCH_WHEN = ("最近", "这几天", "这阵子")
_WATCH = ("追一部古装剧", "看一部纪录片", "读一本推理小说", "听一档播客", "看一部老动画", "追一档综艺")
_OPINIONS = ("剧情有点拖", "挺下饭的", "每次都想接着看", "节奏很快", "看得我直犯困", "结局完全猜不到")


def is_unrelated(sentence: str) -> bool:
    """Long enough to be a statement, and about none of MemDaily's subjects."""
    cjk = sum(1 for ch in sentence if "\u4e00" <= ch <= "\u9fff")
    return cjk >= 4 and not any(word in sentence for word in MEMDAILY_SUBJECTS)


def synthetic_small_talk() -> list[str]:
    """Every template combination, in a fixed order (callers sample with their own seeded RNG)."""
    daily = (f"{when}{first}，{second}。" for when, (first, second) in itertools.product(_WHEN, _PAIRS))
    meals = (f"{meal}吃了{food}，{taste}。"
             for meal, food, taste in itertools.product(_MEALS, _FOODS, _TASTES))
    shows = (f"{when}在{what}，{opinion}。"
             for when, what, opinion in itertools.product(_WATCH_WHEN, _WATCH, _OPINIONS))
    return [s for s in itertools.chain(daily, meals, shows) if is_unrelated(s)]


class DistractorPool:
    """The candidate sentences, deduplicated and filtered, in a stable order."""

    def __init__(self, extra_sentences: Iterable[str] = ()) -> None:
        pooled = dict.fromkeys(s.strip() for s in itertools.chain(extra_sentences, synthetic_small_talk()))
        self.sentences: tuple[str, ...] = tuple(s for s in pooled if is_unrelated(s))
        self.rejected = len(pooled) - len(self.sentences)

    def sample(self, n: int, rng: random.Random, avoid: Sequence[str] = ()) -> list[str]:
        """n distinct sentences, none equal to one in ``avoid`` (the scope's real memories)."""
        banned = {s.strip() for s in avoid}
        allowed = [s for s in self.sentences if s not in banned]
        if n > len(allowed):
            raise ValueError(f"need {n} distractors but the pool only has {len(allowed)}")
        return rng.sample(allowed, n)
