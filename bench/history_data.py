"""Synthetic customer-service conversations for the history-compression bench.

`conversations(seed, count, ...)` writes long conversations between a customer and an
agent, in Chinese or English, about several orders: orders placed, deliveries shipped
(carrier, tracking number, arrival date), complaints about delays or damage (the delay
sometimes said again, longer, later) with the compensation the agent grants, refunds
requested and then approved, paid back or declined, and preference changes (how to be
contacted, when to be delivered) that change more than once. Each matter is one scene of a
few turns; scenes are spread over the conversation with small talk and questions between
and inside them, so most turns carry no fact. The same seed gives the same conversations.

`questions(conv)` asks, from the ground truth the generator kept, what the facts answer:
an order's number (asked by the item bought), a complaint's delay and compensation, a
refund's current state, a delivery's tracking number, and a preference's current value.
Each question names the turn that states the current answer (its evidence) and the forms
the answer may take: the fact's normalised value (3d, 5元, approved) and the words the
turn said (三天, 3 days, 审核通过).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Conversation", "Question", "Turn", "conversations", "questions"]

ZH_NUM = {1: "一", 2: "两", 3: "三", 4: "四", 5: "五", 6: "六", 7: "七", 8: "八", 9: "九", 10: "十"}
EN_NUM = {
    1: "one",
    2: "two",
    3: "three",
    4: "four",
    5: "five",
    6: "six",
    7: "seven",
    8: "eight",
    9: "nine",
    10: "ten",
}
ITEMS_ZH = [
    "蓝色衬衫",
    "保温杯",
    "蓝牙耳机",
    "运动鞋",
    "羊毛围巾",
    "电热水壶",
    "儿童书包",
    "机械键盘",
    "瑜伽垫",
    "台灯",
    "双肩包",
    "陶瓷餐具",
]
ITEMS_EN = [
    "blue shirt",
    "travel mug",
    "bluetooth headset",
    "pair of running shoes",
    "wool scarf",
    "electric kettle",
    "school backpack",
    "mechanical keyboard",
    "yoga mat",
    "desk lamp",
    "hiking backpack",
    "ceramic dinner set",
]
CARRIERS_ZH = [("顺丰", "SF"), ("中通", "ZT"), ("圆通", "YT"), ("韵达", "YD")]
CARRIERS_EN = [("UPS", "1Z"), ("FedEx", "FX"), ("DHL", "DH"), ("USPS", "US")]
MONTHS_EN = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

SMALL_TALK_ZH = [
    ("客户", "你好，在吗？"),
    ("客服", "您好，很高兴为您服务，请问有什么可以帮您？"),
    ("客户", "今天天气真不错，适合出去走走。"),
    ("客服", "是呀，祝您有愉快的一天。"),
    ("客户", "你们的客服响应还挺快的。"),
    ("客服", "谢谢您的认可，我们会继续努力。"),
    ("客户", "稍等一下，我去拿个快递。"),
    ("客户", "好的，我知道了，谢谢。"),
    ("客服", "不客气，还有其他问题吗？"),
    ("客户", "最近工作太忙了，一直没空看手机。"),
    ("客服", "理解理解，您辛苦了。"),
    ("客户", "你们周末也上班吗？"),
    ("客服", "我们的在线客服全年无休。"),
    ("客户", "我朋友也在你们家买过东西，说质量不错。"),
    ("客服", "感谢您和朋友的支持！"),
    ("客户", "你们最近有什么活动吗？"),
    ("客服", "本周会员日全场九五折，欢迎关注。"),
    ("客户", "嗯嗯，好的。"),
    ("客户", "我先去吃个饭，等会再聊。"),
    ("客服", "好的，您随时找我。"),
    ("客户", "你们的退款政策是什么？"),
    ("客服", "一般七天无理由退货，具体以商品页面为准。"),
    ("客户", "能开发票吗？"),
    ("客服", "可以的，在订单详情里申请电子发票即可。"),
    ("客户", "如果晚了几天会有补偿吗？"),
    ("客服", "会根据具体情况处理，请您放心。"),
]
SMALL_TALK_EN = [
    ("customer", "Hi, is anyone there?"),
    ("agent", "Hello! Thanks for reaching out, how can I help you today?"),
    ("customer", "Lovely weather today, isn't it."),
    ("agent", "It is! I hope you get to enjoy it."),
    ("customer", "Your support team is pretty quick to answer."),
    ("agent", "Thank you, we do our best."),
    ("customer", "Hold on a second, someone is at the door."),
    ("customer", "Okay, got it, thanks."),
    ("agent", "You're welcome. Is there anything else I can do for you?"),
    ("customer", "Work has been crazy this week, sorry for the slow replies."),
    ("agent", "No worries at all, take your time."),
    ("customer", "Do you work on weekends too?"),
    ("agent", "Our online support is open every day of the year."),
    ("customer", "A friend of mine recommended your shop."),
    ("agent", "That's great to hear, please thank them for us!"),
    ("customer", "Do you have any promotions at the moment?"),
    ("agent", "Members get 5% off everything this week."),
    ("customer", "Sure, sounds good."),
    ("customer", "I'm heading out for lunch, talk later."),
    ("agent", "Of course, message me any time."),
    ("customer", "What is your refund policy?"),
    ("agent", "Most items can be returned within 30 days, see the product page for details."),
    ("customer", "Can I get an invoice?"),
    ("agent", "Yes, you can request one from the order details page."),
    ("customer", "If a parcel is a few days late, do you compensate?"),
    ("agent", "We look at each case individually, don't worry."),
]


@dataclass(frozen=True)
class Turn:
    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    conv: str
    index: int
    kind: str  # order_id, delay, compensation, refund_state, tracking, preference
    text: str
    answer: str  # the fact's normalised value
    forms: tuple[str, ...]  # every way the answer may be written (normalised or as said)
    evidence: tuple[int, ...]  # turns (indexes) that state the current answer


@dataclass
class Conversation:
    cid: str
    language: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


@dataclass
class _Scene:
    turns: list[tuple[str, str]]
    # question kind -> (text, answer, forms, position of the evidence turn in the scene)
    asks: list[tuple[str, str, str, tuple[str, ...], int]]
    after: str | None = None  # a scene that must come before this one
    name: str | None = None  # what a later scene names as `after` (else its order number)


def _order_id(rng: random.Random, used: set[str]) -> str:
    while True:
        oid = f"2024{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}-{rng.randint(1, 99)}"
        if oid not in used:
            used.add(oid)
            return oid


def _zh_scenes(rng: random.Random, orders: int, used: set[str]) -> list[_Scene]:
    scenes: list[_Scene] = []
    items = rng.sample(ITEMS_ZH, orders)
    for item in items:
        oid = _order_id(rng, used)
        price = rng.randint(19, 899)
        placed = rng.choice(
            [
                f"我在你们店买了一件{item}，订单号是{oid}，付了{price}元。",
                f"上周下单了{item}，单号{oid}，一共{price}元。",
                f"我订了{item}，订单号为{oid}，花了{price}块钱。",
            ]
        )
        scenes.append(
            _Scene(
                [("客户", placed), ("客服", "好的，已经查到您的订单了。")],
                [("order_id", f"我买{item}的订单号是多少？", oid, (oid,), 0)],
            )
        )
        carrier, prefix = rng.choice(CARRIERS_ZH)
        tracking = f"{prefix}{rng.randint(10**10, 10**11 - 1)}"
        month, day = rng.randint(1, 12), rng.randint(1, 28)
        shipped = [
            ("客户", f"我的订单{oid}到哪了？"),
            (
                "客服",
                f"订单{oid}已经发货了，{carrier}快递，运单号{tracking}，预计{month}月{day}日送达。",
            ),
        ]
        scenes.append(
            _Scene(
                shipped,
                [("tracking", f"订单{oid}的快递单号是多少？", tracking, (tracking,), 1)],
                after=oid,
            )
        )
        roll = rng.random()
        if roll < 0.55:
            d1 = rng.randint(2, 5)
            d2 = d1 + rng.randint(1, 4)
            comp = rng.choice([5, 10, 15, 20, 30, 50])
            turns = [
                (
                    "客户",
                    rng.choice(
                        [
                            f"订单{oid}到现在还没到，已经晚了{ZH_NUM[d1]}天了！",
                            f"我要投诉，{oid}这单比承诺的延误了{d1}天。",
                            f"{oid}这个订单怎么回事，都推迟了{ZH_NUM[d1]}天了。",
                        ]
                    ),
                ),
                ("客服", "非常抱歉给您带来不便，我马上帮您催一下。"),
            ]
            said_again = rng.random() < 0.5
            if said_again:
                turns += [
                    ("客户", "好的，谢谢。"),
                    (
                        "客户",
                        f"订单{oid}现在已经晚了{ZH_NUM[d2] if d2 <= 10 else d2}天了，还是没到。",
                    ),
                ]
            delay = d2 if said_again else d1
            delay_at = len(turns) - 1 if said_again else 0
            turns.append(
                (
                    "客服",
                    rng.choice(
                        [
                            f"为表歉意，给您补偿{comp}元，已经发到您的账户。",
                            f"实在抱歉，我们赔偿您{comp}元优惠券。",
                        ]
                    ),
                )
            )
            delay_forms = (f"{delay}d", f"{delay}天", f"{ZH_NUM.get(delay, delay)}天")
            scenes.append(
                _Scene(
                    turns,
                    [
                        ("delay", f"订单{oid}晚了几天？", f"{delay}d", delay_forms, delay_at),
                        (
                            "compensation",
                            f"订单{oid}补偿了多少钱？",
                            f"{comp}元",
                            (f"{comp}元",),
                            len(turns) - 1,
                        ),
                    ],
                    after=oid,
                )
            )
        elif roll < 0.85:
            amount = price
            state, said = rng.choice(
                [
                    ("approved", f"您的退款{amount}元已经审核通过，请耐心等待。"),
                    ("refunded", f"退款{amount}元已原路退回，请注意查收。"),
                    ("rejected", "很抱歉，您的退款申请未通过，商品已经超过退货期。"),
                ]
            )
            words = {"approved": "审核通过", "refunded": "退回", "rejected": "未通过"}[state]
            turns = [
                ("客户", f"订单{oid}我要申请退款，{item}不合适。"),
                ("客服", "好的，我这边帮您提交一下。"),
                ("客户", "大概要多久？"),
                ("客服", said),
            ]
            scenes.append(
                _Scene(
                    turns,
                    [("refund_state", f"订单{oid}的退款状态是什么？", state, (state, words), 3)],
                    after=oid,
                )
            )
    return scenes


def _en_scenes(rng: random.Random, orders: int, used: set[str]) -> list[_Scene]:
    scenes: list[_Scene] = []
    items = rng.sample(ITEMS_EN, orders)
    for item in items:
        oid = _order_id(rng, used)
        price = rng.randint(9, 299)
        placed = rng.choice(
            [
                f"I bought a {item} from you, order number {oid}, paid ${price}.",
                f"Last week I ordered a {item}, order #{oid}, I paid ${price} for it.",
                f"I purchased a {item}; the order number is {oid}.",
            ]
        )
        scenes.append(
            _Scene(
                [("customer", placed), ("agent", "Thanks, I found your order.")],
                [("order_id", f"What is the order number of the {item} I bought?", oid, (oid,), 0)],
            )
        )
        carrier, prefix = rng.choice(CARRIERS_EN)
        tracking = f"{prefix}{rng.randint(10**9, 10**10 - 1)}"
        month = MONTHS_EN[rng.randint(0, 11)]
        day = rng.randint(1, 28)
        shipped = [
            ("customer", f"Where is my order {oid}?"),
            (
                "agent",
                f"Order {oid} has shipped with {carrier}, tracking number {tracking}, "
                f"expected to arrive on {month} {day}.",
            ),
        ]
        scenes.append(
            _Scene(
                shipped,
                [
                    (
                        "tracking",
                        f"What is the tracking number of order {oid}?",
                        tracking,
                        (tracking,),
                        1,
                    )
                ],
                after=oid,
            )
        )
        roll = rng.random()
        if roll < 0.55:
            d1 = rng.randint(2, 5)
            d2 = d1 + rng.randint(1, 4)
            comp = rng.choice([5, 10, 15, 20, 30, 50])
            turns = [
                (
                    "customer",
                    rng.choice(
                        [
                            f"My order {oid} still hasn't arrived, it's {EN_NUM[d1]} days late!",
                            f"I want to complain: order {oid} is {d1} days overdue.",
                            f"Order number {oid} is now {EN_NUM[d1]} days behind schedule.",
                        ]
                    ),
                ),
                ("agent", "I'm really sorry about that, let me chase the carrier for you."),
            ]
            said_again = rng.random() < 0.5
            if said_again:
                turns += [
                    ("customer", "Okay, thanks."),
                    ("customer", f"Order {oid} is now {d2} days late and still nothing."),
                ]
            delay = d2 if said_again else d1
            delay_at = len(turns) - 1 if said_again else 0
            turns.append(
                (
                    "agent",
                    rng.choice(
                        [
                            f"To make up for it, we will compensate you ${comp}.",
                            f"We're sorry, we'll compensate you with ${comp} store credit.",
                        ]
                    ),
                )
            )
            delay_forms = (f"{delay}d", f"{delay} days", f"{EN_NUM.get(delay, delay)} days")
            scenes.append(
                _Scene(
                    turns,
                    [
                        (
                            "delay",
                            f"How many days late is order {oid}?",
                            f"{delay}d",
                            delay_forms,
                            delay_at,
                        ),
                        (
                            "compensation",
                            f"How much compensation did I get for order {oid}?",
                            f"${comp}",
                            (f"${comp}",),
                            len(turns) - 1,
                        ),
                    ],
                    after=oid,
                )
            )
        elif roll < 0.85:
            state, said = rng.choice(
                [
                    ("approved", f"Your refund of ${price} has been approved."),
                    ("refunded", f"Your refund of ${price} has been credited to your card."),
                    (
                        "rejected",
                        "Sorry, your refund request was declined: the return window has closed.",
                    ),
                ]
            )
            words = {"approved": "approved", "refunded": "credited", "rejected": "declined"}[state]
            turns = [
                ("customer", f"I'd like a refund for order {oid}, the {item} doesn't fit."),
                ("agent", "Sure, I'm submitting the request now."),
                ("customer", "How long will it take?"),
                ("agent", said),
            ]
            scenes.append(
                _Scene(
                    turns,
                    [
                        (
                            "refund_state",
                            f"What is the state of the refund for order {oid}?",
                            state,
                            (state, words),
                            3,
                        )
                    ],
                    after=oid,
                )
            )
    return scenes


PREFS_ZH = {
    "contact": (
        ["电话", "短信", "邮件", "微信"],
        ["以后联系我请用{v}。", "联系方式改成{v}吧。"],
        "我现在希望你们用什么方式联系我？",
    ),
    "delivery_time": (
        ["工作日", "周末", "晚上", "上午"],
        ["送货时间改成{v}。", "以后配送时间改到{v}吧。"],
        "我现在希望什么时间送货？",
    ),
}
PREFS_EN = {
    "contact": (
        ["phone", "sms", "email", "wechat"],
        ["Please contact me by {v} from now on.", "Could you reach me via {v} instead"],
        "How do I want to be contacted now?",
    ),
    "delivery_time": (
        ["weekdays", "weekends", "evenings", "mornings"],
        ["Please deliver on {v} from now on.", "Switch my deliveries to {v}, please."],
        "When do I want deliveries now?",
    ),
}


def _pref_scenes(rng: random.Random, language: str) -> list[_Scene]:
    prefs = PREFS_ZH if language == "zh" else PREFS_EN
    speaker, ack = (
        ("客户", "好的，已为您更新。")
        if language == "zh"
        else ("customer", "Done, I've updated that.")
    )
    agent = "客服" if language == "zh" else "agent"
    scenes: list[_Scene] = []
    for topic, (values, phrasings, question) in prefs.items():
        changes = rng.sample(values, rng.randint(2, 3))
        for i, value in enumerate(changes):
            text = rng.choice(phrasings).format(v=value)
            asks = [("preference", question, value, (value,), 0)] if i == len(changes) - 1 else []
            scenes.append(
                _Scene(
                    [(speaker, text), (agent, ack)],
                    asks,
                    after=f"{topic}:{i - 1}" if i else None,
                    name=f"{topic}:{i}",
                )
            )
    return scenes


def conversations(
    seed: int, count: int, *, orders: tuple[int, int] = (3, 5), chatter: tuple[int, int] = (4, 9)
) -> list[Conversation]:
    """`count` conversations, alternately Chinese and English, from one seed."""
    rng = random.Random(seed)
    out: list[Conversation] = []
    for c in range(count):
        language = "zh" if c % 2 == 0 else "en"
        used: set[str] = set()
        n = rng.randint(*orders)
        scenes = (_zh_scenes if language == "zh" else _en_scenes)(rng, n, used)
        scenes += _pref_scenes(rng, language)
        ordered = _order(rng, scenes)
        talk = SMALL_TALK_ZH if language == "zh" else SMALL_TALK_EN
        conv = Conversation(cid=f"{language}-{c:03d}", language=language)
        asks: list[tuple[str, str, str, tuple[str, ...], int]] = []
        for scene in ordered:
            for _ in range(rng.randint(*chatter)):
                conv.turns.append(Turn(*rng.choice(talk)))
            positions: list[int] = []
            for k, (speaker, text) in enumerate(scene.turns):
                if k and rng.random() < 0.3:  # small talk inside a scene, too
                    conv.turns.append(Turn(*rng.choice(talk)))
                positions.append(len(conv.turns))
                conv.turns.append(Turn(speaker, text))
            for kind, text, answer, forms, at in scene.asks:
                asks.append((kind, text, answer, forms, positions[at]))
        for _ in range(rng.randint(*chatter)):
            conv.turns.append(Turn(*rng.choice(talk)))
        conv.questions = [
            Question(conv.cid, i, kind, text, answer, forms, (at,))
            for i, (kind, text, answer, forms, at) in enumerate(asks)
        ]
        out.append(conv)
    return out


def _order(rng: random.Random, scenes: list[_Scene]) -> list[_Scene]:
    """The scenes shuffled, each after the one it depends on (an order is placed before it
    ships or is complained about; a preference changes in order)."""
    rng.shuffle(scenes)
    placed: list[_Scene] = []
    done: set[str] = set()
    waiting = list(scenes)
    while waiting:
        for scene in waiting:
            if scene.after is None or scene.after in done:
                placed.append(scene)
                waiting.remove(scene)
                done.add(scene.name or _first_order(scene) or "")
                break
        else:  # pragma: no cover - every dependency is generated
            raise RuntimeError("a scene depends on one that is never placed")
    return placed


def _first_order(scene: _Scene) -> str | None:
    for kind, _text, answer, _forms, _at in scene.asks:
        if kind == "order_id":
            return answer
    return None


def questions(conv: Conversation) -> list[Question]:
    return conv.questions
