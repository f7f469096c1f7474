"""What registration derives for a conversation turn: episodes from the pauses between a
subject's turns, and speakers from the text, in English and Chinese."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mnemo.domain.derivation import (
    EPISODE_GAP,
    derived_episode,
    episode_of,
    speaker_name,
    speaker_of,
    speaker_tag,
)

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def split(times: list[datetime]) -> list[str]:
    """Episodes of turns registered in order, each joining the turn before it or not."""
    out: list[str] = []
    previous: tuple[datetime, tuple[str, ...]] | None = None
    for i, at in enumerate(times):
        tag = derived_episode(f"m{i}", at, previous)
        out.append(tag)
        previous = (at, (tag,))
    return out


def test_turns_closer_than_the_gap_share_an_episode_and_a_longer_pause_starts_one() -> None:
    times = [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]
    times += [times[-1] + EPISODE_GAP + timedelta(seconds=1)]
    times += [times[-1] + timedelta(minutes=5), T0 + timedelta(days=17)]
    assert split(times) == [
        "episode:m0",
        "episode:m0",
        "episode:m0",
        "episode:m3",
        "episode:m3",
        "episode:m5",
    ]


def test_a_pause_of_exactly_the_gap_still_continues_the_episode() -> None:
    assert split([T0, T0 + EPISODE_GAP]) == ["episode:m0", "episode:m0"]


def test_a_long_conversation_of_short_pauses_stays_one_episode() -> None:
    times = [T0 + i * timedelta(minutes=20) for i in range(12)]  # four hours in all
    assert set(split(times)) == {"episode:m0"}


def test_a_turn_joins_the_episode_the_client_tagged_before_it() -> None:
    previous = (T0, ("episode:support-42", "turn"))
    assert derived_episode("m1", T0 + timedelta(minutes=3), previous) == "episode:support-42"


def test_a_turn_stamped_before_the_one_it_follows_starts_its_own_episode() -> None:
    previous = (T0, ("episode:m0",))
    assert derived_episode("m1", T0 - timedelta(minutes=1), previous) == "episode:m1"


def test_without_an_earlier_turn_or_its_episode_a_new_one_starts() -> None:
    assert derived_episode("m7", T0, None) == "episode:m7"
    assert derived_episode("m7", T0, (T0, ("turn",))) == "episode:m7"


@pytest.mark.parametrize(
    ("text", "speaker"),
    [
        ("Caroline: I went to a LGBTQ support group yesterday.", "Caroline"),
        ("Mary Ann: see you at six", "Mary Ann"),
        ("Dr. Chen: take two a day", "Dr. Chen"),
        ("O'Brien : fine by me", "O'Brien"),
        ("张伟：我下周去上海出差。", "张伟"),
        ("李娜: 我对花生过敏", "李娜"),
        ("Hi, my name is Ana and I need a refund.", "Ana"),
        ("你好，我叫王芳，想改一下地址。", "王芳"),
    ],
)
def test_the_speaker_comes_from_a_name_prefix_or_a_self_introduction(
    text: str, speaker: str
) -> None:
    assert speaker_of(text) == speaker


@pytest.mark.parametrize(
    "text",
    [
        "Note: the meeting moved to Friday.",
        "PS: bring the charger",
        "10:30: dentist",
        "I'm tired: long day",
        "注意：明天停电",
        "备注：客户要求回电",
        "see https://example.com: the docs",
        "Caroline:",
        "我叫车去机场",
    ],
)
def test_text_that_names_nobody_has_no_speaker(text: str) -> None:
    assert speaker_of(text) is None


def test_speaker_tags_fold_names_and_read_back_as_words() -> None:
    assert speaker_tag("Mary Ann") == "speaker:mary-ann"
    assert speaker_tag("Dr. Chen") == "speaker:dr-chen"
    assert speaker_tag("张伟") == "speaker:张伟"
    assert speaker_tag("...") is None
    assert speaker_name(("episode:m0", "speaker:mary-ann")) == "mary ann"
    assert speaker_name(("turn",)) is None
    assert episode_of(("dia:D1_3", "episode:m0")) == "episode:m0"


def test_a_chinese_self_introduction_needs_a_name_that_ends_at_a_pause() -> None:
    assert speaker_of("我叫了车，马上到") is None
    assert speaker_of("我的名字是欧阳娜娜。") == "欧阳娜娜"
