"""Synthetic Chinese memories and user messages for the scale benchmark.

Memories look like what extraction writes (``YYYY-MM-DD 发生了什么`` with 2-5 keywords); messages look
like what users type. Both draw on one vocabulary of about 250 words, so a 10,000-memory user has long
posting lists (every word sits in dozens of memories): a pessimistic case for the keyword index.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from companion.core.models import MemoryDraft, MemoryType, Validity

TZ = ZoneInfo("Asia/Shanghai")
HISTORY = timedelta(days=60)

SYMPTOMS = ("感冒", "发烧", "咳嗽", "头疼", "胃疼", "牙疼", "失眠", "过敏", "拉肚子", "腰疼", "嗓子疼", "鼻炎",
            "颈椎病", "低血糖", "贫血", "胃炎", "湿疹", "偏头痛", "扭伤脚踝", "近视加深")
DEPARTMENTS = ("内科", "外科", "牙科", "皮肤科", "骨科", "眼科", "耳鼻喉科", "中医科", "急诊", "消化科")
FOODS = ("火锅", "奶茶", "麻辣烫", "小龙虾", "烤鸭", "寿司", "螺蛳粉", "煎饼果子", "酸菜鱼", "牛肉面", "饺子",
         "烧烤", "披萨", "冰淇淋", "咖啡", "蛋糕", "炸鸡", "凉皮", "羊肉串", "豆浆", "油条", "米线", "粥",
         "红烧肉", "糖醋排骨", "宫保鸡丁", "臭豆腐", "肠粉", "生煎包", "榴莲")
PLACES = ("公司楼下", "学校门口", "商场", "夜市", "老家", "地铁站旁边", "小区对面", "步行街", "机场", "火车站",
          "西湖", "外滩", "故宫", "鼓浪屿", "洱海", "长城", "迪士尼", "动物园", "图书馆", "健身房")
HOBBIES = ("跑步", "游泳", "爬山", "骑车", "打羽毛球", "弹吉他", "画画", "拍照", "看电影", "追剧", "打游戏",
           "钓鱼", "做饭", "烘焙", "瑜伽", "练字", "读书", "露营", "滑雪", "唱歌")
PEOPLE = ("妈妈", "爸爸", "姐姐", "弟弟", "男朋友", "女朋友", "室友", "同事", "老板", "闺蜜", "奶奶", "表哥",
          "大学同学", "邻居", "老师", "发小")
PERSON_EVENTS = ("过生日", "住院了", "要结婚了", "换了工作", "搬家了", "来看我", "吵了一架", "送了我礼物",
                 "生病了", "升职了", "去旅游了", "请我吃饭")
JOBS = ("程序员", "设计师", "产品经理", "销售", "会计", "老师", "护士", "记者", "运营", "律师")
WORK_EVENTS = ("面试", "加班", "离职", "入职", "升职", "出差", "开会", "被裁员", "跳槽", "考证", "写报告",
               "做项目", "述职", "年终总结")
PETS = ("猫", "狗", "仓鼠", "兔子", "金鱼", "鹦鹉")
PET_NAMES = ("布丁", "可乐", "团子", "豆豆", "雪球", "旺财", "咪咪", "花卷")
FEELINGS = ("开心", "焦虑", "难过", "紧张", "生气", "疲惫", "兴奋", "无聊", "委屈", "轻松")

Template = Callable[[random.Random], tuple[str, list[str], MemoryType]]


def _health(r: random.Random) -> tuple[str, list[str], MemoryType]:
    s, d = r.choice(SYMPTOMS), r.choice(DEPARTMENTS)
    return f"{s}了，去医院{d}看了医生", [s, d, "医院"], MemoryType.EVENT


def _food(r: random.Random) -> tuple[str, list[str], MemoryType]:
    f, p = r.choice(FOODS), r.choice(PLACES)
    return f"喜欢吃{f}，常去{p}那家", [f, p], MemoryType.PREFERENCE


def _dislike(r: random.Random) -> tuple[str, list[str], MemoryType]:
    f = r.choice(FOODS)
    return f"不喜欢{f}，觉得太腻了", [f, "不喜欢"], MemoryType.PREFERENCE


def _hobby(r: random.Random) -> tuple[str, list[str], MemoryType]:
    h, p, f = r.choice(HOBBIES), r.choice(PLACES), r.choice(FEELINGS)
    return f"周末去{p}{h}，很{f}", [h, p, "周末"], MemoryType.EVENT


def _person(r: random.Random) -> tuple[str, list[str], MemoryType]:
    p, e = r.choice(PEOPLE), r.choice(PERSON_EVENTS)
    return f"{p}{e}", [p, e], MemoryType.EVENT


def _work(r: random.Random) -> tuple[str, list[str], MemoryType]:
    j, w, f = r.choice(JOBS), r.choice(WORK_EVENTS), r.choice(FEELINGS)
    return f"做{j}的工作，最近在{w}，有点{f}", [j, w, "工作"], MemoryType.FACT


def _pet(r: random.Random) -> tuple[str, list[str], MemoryType]:
    a, n = r.choice(PETS), r.choice(PET_NAMES)
    return f"养了一只{a}叫{n}", [a, n, "宠物"], MemoryType.FACT


def _travel(r: random.Random) -> tuple[str, list[str], MemoryType]:
    p, q = r.choice(PEOPLE), r.choice(PLACES)
    return f"和{p}计划去{q}旅游", [q, p, "旅游"], MemoryType.EVENT


TEMPLATES: tuple[Template, ...] = (_health, _food, _dislike, _hobby, _person, _work, _pet, _travel)
VALIDITIES = (Validity.PERMANENT,) * 3 + (Validity.DAYS_30,) * 5 + (Validity.DAYS_7,) * 2


def memory(r: random.Random, now: datetime) -> MemoryDraft:
    """One memory written some time in the last two months, as extraction would write it."""
    text, keywords, kind = r.choice(TEMPLATES)(r)
    created = now - timedelta(seconds=r.uniform(0, HISTORY.total_seconds()))
    return MemoryDraft(
        event=f"{created.astimezone(TZ):%Y-%m-%d} {text}", keywords=keywords,
        importance=float(r.randint(20, 95)), validity=r.choice(VALIDITIES), type=kind, created_at=created,
    )


def memories(r: random.Random, count: int, now: datetime) -> list[MemoryDraft]:
    return [memory(r, now) for _ in range(count)]


MESSAGES: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"最近又{r.choice(SYMPTOMS)}了，好难受",
    lambda r: f"今天中午去吃了{r.choice(FOODS)}，味道一般",
    lambda r: f"{r.choice(PEOPLE)}说周末要来看我",
    lambda r: f"工作上{r.choice(WORK_EVENTS)}的事情好烦啊",
    lambda r: f"想去{r.choice(PLACES)}走走，你觉得呢",
    lambda r: f"我家{r.choice(PET_NAMES)}今天特别调皮",
    lambda r: f"今天有点{r.choice(FEELINGS)}，不知道为什么",
    lambda r: f"周末打算去{r.choice(HOBBIES)}",
    lambda r: "哈哈哈你说得对",
    lambda r: "晚安啦，明天还要早起",
)


def message(r: random.Random) -> str:
    """A user turn: most touch the vocabulary, some are small talk that should recall nothing."""
    return r.choice(MESSAGES)(r)
