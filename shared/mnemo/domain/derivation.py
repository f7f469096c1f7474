"""What registration derives for a history memory (one turn of a conversation) from what
any client sends anyway: the event time and the text.

- Episode: a subject's turns that follow each other with no pause longer than
  EPISODE_GAP belong to one episode, named after its first turn. A turn that comes later
  than that starts a new one. A client that tags its turns `episode:<id>` itself keeps
  its own tags.
- Speaker: the name in front of a "Name: text" line ("Caroline: I went ...", "张伟：我想
  ..."), or the name a speaker gives ("my name is Ana", "我叫李娜"). Kept as a
  `speaker:<name>` tag, which ranking reads the way it reads a named source.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime, timedelta

__all__ = [
    "EPISODE_GAP",
    "EPISODE_PREFIX",
    "SPEAKER_PREFIX",
    "derived_episode",
    "episode_of",
    "speaker_name",
    "speaker_of",
    "speaker_tag",
]

EPISODE_PREFIX = "episode:"
SPEAKER_PREFIX = "speaker:"
# a longer pause than this between two turns of a subject starts a new episode
EPISODE_GAP = timedelta(minutes=30)
_MAX_TAG = 64

# "Caroline: ...", "Mary Ann: ...", "O'Brien: ...", "Dr. Chen: ...": one to three words,
# each capitalised; then a colon (ASCII or full width) and something said
_LATIN_NAME = r"[A-Z][a-zA-Z'\-]*\.?(?: [A-Z][a-zA-Z'\-]*\.?){0,2}"
_CJK_NAME = r"[\u3400-\u4dbf\u4e00-\u9fff][\u3400-\u4dbf\u4e00-\u9fff·]{0,7}"
_PREFIX = re.compile(rf"^\s*({_LATIN_NAME}|{_CJK_NAME})\s*[:：]\s*(?=\S)")
# a name given in the first person
_INTRODUCED = re.compile(
    r"\b(?:my name is|my name's|call me)\s+([A-Z][a-zA-Z'\-]+(?: [A-Z][a-zA-Z'\-]+)?)"
    r"|(?:我叫|我的名字是|我的名字叫)(?![了过着车人你他她它的一])"
    r"([\u3400-\u4dbf\u4e00-\u9fff·]{2,4}?)(?=[，。！？、,.!?\s])"
)
# words that stand before a colon without naming anyone
_NOT_NAMES = frozenset(
    {
        "a",
        "answer",
        "attention",
        "caution",
        "date",
        "error",
        "example",
        "fyi",
        "important",
        "info",
        "note",
        "notes",
        "ps",
        "q",
        "question",
        "re",
        "reminder",
        "subject",
        "summary",
        "tip",
        "todo",
        "update",
        "warning",
        "注意",
        "提示",
        "备注",
        "问题",
        "回答",
        "答",
        "问",
        "总结",
        "警告",
        "时间",
        "日期",
        "地址",
        "电话",
    }
)


def speaker_of(content: str) -> str | None:
    """The speaker a turn's text names: a "Name: text" prefix, else a self-introduction."""
    match = _PREFIX.match(content)
    if match is not None:
        name = match.group(1).strip()
        if name.lower().rstrip(".") not in _NOT_NAMES:
            return name
    found = _INTRODUCED.search(content)
    if found is not None:
        return (found.group(1) or found.group(2)).strip()
    return None


def speaker_tag(name: str) -> str | None:
    """The tag that records a speaker ("Mary Ann" -> "speaker:mary-ann"), or None for a
    name with nothing a tag can hold."""
    folded = unicodedata.normalize("NFKC", name).lower()
    words = re.findall(r"[^\W_]+", folded)
    if not words:
        return None
    return (SPEAKER_PREFIX + "-".join(words))[:_MAX_TAG].rstrip("-")


def speaker_name(tags: tuple[str, ...]) -> str | None:
    """The speaker a memory's tags record, as words ("speaker:mary-ann" -> "mary ann")."""
    for tag in tags:
        if tag.startswith(SPEAKER_PREFIX) and len(tag) > len(SPEAKER_PREFIX):
            return tag[len(SPEAKER_PREFIX) :].replace("-", " ")
    return None


def episode_of(tags: tuple[str, ...]) -> str | None:
    """A memory's episode tag, the client's or the derived one."""
    return next((t for t in tags if t.startswith(EPISODE_PREFIX)), None)


def derived_episode(
    memory_id: str, at: datetime, previous: tuple[datetime, tuple[str, ...]] | None
) -> str:
    """The episode tag of a new turn at `at`, given the subject's turn right before it (its
    time and tags), if any: that turn's episode when the pause is at most EPISODE_GAP, else
    a new episode named after this turn."""
    if previous is not None:
        before, tags = previous
        joined = episode_of(tags)
        if joined is not None and timedelta(0) <= at - before <= EPISODE_GAP:
            return joined
    return EPISODE_PREFIX + memory_id
