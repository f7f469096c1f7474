"""Deterministic benchmark texts: short memories and queries, mixed English and Chinese,
drawn from templates with a seeded random generator (same seed, same texts, every run)."""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["memory_texts", "query_texts", "variant"]

_NAMES = (
    "Alice", "Bob", "Chen Wei", "Dana", "Emeka", "Fatima", "Gustavo", "Hiro", "Ingrid",
    "Jamal", "Kenji", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sven",
    "Tariq", "Uma", "Viktor", "Wen", "Ximena", "Yusuf", "Zoe",
)  # fmt: skip
_ZH_NAMES = (
    "王芳", "李伟", "张敏", "刘洋", "陈静", "杨磊", "赵丽", "黄强", "周杰", "吴婷",
    "徐明", "孙悦", "马超", "朱琳", "胡斌", "郭靖",
)  # fmt: skip
_CITIES = (
    "Tokyo", "Berlin", "Lisbon", "Nairobi", "Toronto", "Seoul", "Lima", "Oslo", "Cairo",
    "Austin", "Hanoi", "Prague",
)  # fmt: skip
_ZH_CITIES = ("北京", "上海", "深圳", "杭州", "成都", "广州", "西安", "南京", "武汉", "厦门")
_FOODS = ("peanuts", "shellfish", "gluten", "dairy", "sesame", "eggs", "soy", "cilantro")
_ZH_FOODS = ("花生", "海鲜", "牛奶", "鸡蛋", "香菜", "芒果", "辣椒", "坚果")
_DRINKS = ("black coffee", "green tea", "oat latte", "espresso", "chai", "matcha")
_ZH_DRINKS = ("黑咖啡", "绿茶", "豆浆", "乌龙茶", "拿铁", "红茶")
_PROJECTS = ("Apollo", "Borealis", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Helix")
_ZH_PROJECTS = ("数据平台", "客服系统", "推荐引擎", "支付网关", "移动应用", "年度预算")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_ZH_DAYS = ("周一", "周二", "周三", "周四", "周五", "周六")
_PLACES = ("side", "garage", "back", "lobby", "mailroom", "north")
_ZH_PLACES = ("快递柜", "前台", "物业", "后门", "车库", "邻居家")
_BOOKS = ("Dune", "Middlemarch", "The Overstory", "Piranesi", "Beloved", "Solaris")
_ZH_BOOKS = ("三体", "活着", "围城", "平凡的世界", "红楼梦", "边城")
_DOCS = ("passport", "driving licence", "insurance policy", "gym membership", "visa")
_ZH_DOCS = ("护照", "驾照", "保险", "签证", "租房合同")
_CUISINES = ("Thai", "Ethiopian", "Sichuan", "Mexican", "Georgian", "Korean")
_SEATS = ("window", "aisle", "exit-row", "front-row")
_CATEGORIES = ("旅行", "装修", "买车", "教育", "婚礼", "电子产品")
_CURRENCIES = ("USD", "EUR", "GBP", "JPY")
_MONTHS = ("January", "March", "May", "July", "September", "November")
_HOBBIES = ("bouldering", "sourdough baking", "chess", "trail running", "pottery", "birding")
_ZH_HOBBIES = ("书法", "游泳", "钢琴", "摄影", "爬山", "烘焙")

Filler = Callable[[random.Random], str]


def _pick(values: tuple[str, ...]) -> Filler:
    return lambda r: r.choice(values)


def _num(lo: int, hi: int) -> Filler:
    return lambda r: str(r.randint(lo, hi))


_SLOTS: dict[str, Filler] = {
    "name": _pick(_NAMES),
    "zname": _pick(_ZH_NAMES),
    "city": _pick(_CITIES),
    "zcity": _pick(_ZH_CITIES),
    "food": _pick(_FOODS),
    "zfood": _pick(_ZH_FOODS),
    "drink": _pick(_DRINKS),
    "zdrink": _pick(_ZH_DRINKS),
    "project": _pick(_PROJECTS),
    "zproject": _pick(_ZH_PROJECTS),
    "day": _pick(_DAYS),
    "zday": _pick(_ZH_DAYS),
    "place": _pick(_PLACES),
    "zplace": _pick(_ZH_PLACES),
    "book": _pick(_BOOKS),
    "zbook": _pick(_ZH_BOOKS),
    "doc": _pick(_DOCS),
    "zdoc": _pick(_ZH_DOCS),
    "cuisine": _pick(_CUISINES),
    "seat": _pick(_SEATS),
    "category": _pick(_CATEGORIES),
    "currency": _pick(_CURRENCIES),
    "month": _pick(_MONTHS),
    "hobby": _pick(_HOBBIES),
    "zhobby": _pick(_ZH_HOBBIES),
    "hour": _num(7, 20),
    "dom": _num(1, 28),
    "zmonth": _num(1, 12),
    "amount": lambda r: str(r.randrange(200, 20_000, 50)),
    "stars": _num(1, 5),
    "num": _num(2, 980),
}

_EN_MEMORIES = (
    "{name} prefers {seat} seats when flying to {city}.",
    "The budget for {name}'s trip to {city} is {amount} {currency}.",
    "{name} is allergic to {food} and avoids it when eating out.",
    "The {project} project meeting with {name} moved to {day} at {hour}:00.",
    "{name} drinks {drink} every morning before work.",
    "Leave parcels for {name} at the {place} entrance, not the front door.",
    "{name} finished reading {book} and gave it {stars} stars.",
    "Remind {name} to renew the {doc} before {month} {dom}.",
    "{name}'s favourite {cuisine} restaurant is close to the {place} gate in {city}.",
    "{name} spends weekends on {hobby} and wants gear recommendations.",
    "{name} asked for invoices of the {project} project to be sent every {day}.",
    "When in {city}, {name} stays near the old town and walks everywhere.",
    "{name} does not eat {food}; suggest {cuisine} dishes without it.",
    "The shipping address for {name} is {num} Harbour Street, {city}.",
)
_ZH_MEMORIES = (
    "{zname}去{zcity}出差时喜欢住在地铁站附近的酒店。",
    "{zname}这次{category}的预算是{amount}元。",
    "{zname}对{zfood}过敏，点餐时一定要避开。",
    "和{zname}的{zproject}项目例会改到{zday}{hour}点。",
    "{zname}每天早上都要喝一杯{zdrink}。",
    "{zname}的快递请放在{zplace}，不要放在门口。",
    "{zname}最近在读《{zbook}》，觉得很有意思。",
    "提醒{zname}在{zmonth}月{dom}日前续办{zdoc}。",
    "{zname}周末喜欢{zhobby}，想找相关的课程。",
    "{zname}不吃{zfood}，推荐菜品时请注意。",
    "{zname}希望{zproject}项目的周报每{zday}发给她。",
    "{zname}下个月要去{zcity}，需要提前订好高铁票。",
)
_EN_QUERIES = (
    "which seats does {name} like on flights",
    "what is the travel budget for {city}",
    "is {name} allergic to any food",
    "when is the {project} meeting",
    "what does {name} drink in the morning",
    "where should parcels for {name} be left",
    "what did {name} think of {book}",
    "which documents need renewing soon",
    "good {cuisine} restaurants {name} likes",
    "hobbies of {name} on weekends",
    "{name} food restrictions {food}",
    "shipping address in {city}",
)
_ZH_QUERIES = (
    "{zname}出差喜欢住哪里",
    "{category}的预算是多少",
    "{zname}对什么过敏",
    "{zproject}项目例会是什么时候",
    "{zname}早上喝什么",
    "{zname}的快递放在哪里",
    "{zname}最近在读什么书",
    "哪些证件需要续办",
    "{zname}周末有什么爱好",
    "去{zcity}的交通安排",
)


def _fill(template: str, r: random.Random) -> str:
    values = {slot: fill(r) for slot, fill in _SLOTS.items() if "{" + slot + "}" in template}
    return template.format(**values)


def _distinct(
    n: int, seed: int, en: tuple[str, ...], zh: tuple[str, ...], zh_share: float
) -> list[str]:
    r = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > n * 200:
            raise RuntimeError(f"templates cannot give {n} distinct texts")
        text = _fill(r.choice(zh if r.random() < zh_share else en), r)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def memory_texts(n: int, seed: int = 20240601) -> list[str]:
    """`n` distinct short memory texts, about 40% Chinese."""
    return _distinct(n, seed, _EN_MEMORIES, _ZH_MEMORIES, 0.4)


def query_texts(n: int, seed: int = 7) -> list[str]:
    """`n` distinct search queries over the same topics, about 40% Chinese."""
    return _distinct(n, seed, _EN_QUERIES, _ZH_QUERIES, 0.4)


def variant(text: str, k: int) -> str:
    """A near copy of `text` for bulk loading: same meaning, its own record number."""
    if any("\u4e00" <= ch <= "\u9fff" for ch in text[:4]):
        return f"{text}（记录{k}）"
    return f"{text} (record {k})"
