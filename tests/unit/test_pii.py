"""The PII detector: validators (with property tests), each kind, overlaps, placeholders,
masks and the per-tenant policy."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemo.domain.pii import (
    Action,
    PiiKind,
    PiiPolicy,
    SecurityPolicy,
    cn_id_check_char,
    cn_id_valid,
    detect,
    luhn_valid,
    mask,
    normalize,
    placeholder,
    placeholder_refs,
)

ID = "11010519491231002X"  # the standard's worked example
CARD = "4111 1111 1111 1111"


def kinds(text: str) -> list[tuple[str, str]]:
    return [(f.kind.value, f.value) for f in detect(text)]


def luhn_digit(body: str) -> str:
    for d in "0123456789":
        if luhn_valid(body + d):
            return d
    raise AssertionError("no Luhn digit")


@given(st.text(alphabet="0123456789", min_size=12, max_size=18))
def test_luhn_completes_every_body_and_catches_any_single_digit_change(body: str) -> None:
    number = body + luhn_digit(body)
    assert luhn_valid(number)
    for i in range(len(number)):
        for d in "0123456789":
            if d != number[i]:
                assert not luhn_valid(number[:i] + d + number[i + 1 :])


@given(
    st.text(alphabet="123456789", min_size=1, max_size=1),
    st.text(alphabet="0123456789", min_size=5, max_size=5),
    st.dates(min_value=date(1000, 1, 1)),
    st.text(alphabet="0123456789", min_size=3, max_size=3),
)
def test_resident_id_check_character(first: str, region: str, born: object, seq: str) -> None:
    assert isinstance(born, date)
    body = first + region + born.strftime("%Y%m%d") + seq
    number = body + cn_id_check_char(body)
    assert cn_id_valid(number) == (1900 <= born.year <= 2100)
    if 1900 <= born.year <= 2100:
        for c in "0123456789X":
            if c != number[-1]:
                assert not cn_id_valid(body + c)


def test_resident_id_rejects_bad_dates_and_shapes() -> None:
    assert cn_id_valid(ID)
    assert cn_id_valid(ID.lower())
    assert not cn_id_valid("110105194913310025")  # month 13
    assert not cn_id_valid(ID[:-1])
    assert not cn_id_valid("01010519491231002X")


def test_each_kind_is_found() -> None:
    text = (
        f"我的身份证号是{ID}，卡号 {CARD}，手机13800138000，"
        "mail Li.Wei@Example.com, call +44 20 7946 0958"
    )
    assert kinds(text) == [
        ("id_number", ID),
        ("bank_card", CARD),
        ("phone", "13800138000"),
        ("email", "Li.Wei@Example.com"),
        ("phone", "+44 20 7946 0958"),
    ]


def test_passwords_and_tokens_by_context_and_shape() -> None:
    assert kinds("my password is hunter2!") == [("password", "hunter2!")]
    assert kinds("密码是abc12345") == [("password", "abc12345")]
    assert kinds("password: correcthorse") == [("password", "correcthorse")]
    assert kinds("api key sk-abcdefghijklmnop1234") == [("api_token", "sk-abcdefghijklmnop1234")]
    assert kinds("token=9f8e7d6c5b4a") == [("api_token", "9f8e7d6c5b4a")]
    assert kinds("AKIAABCDEFGHIJKLMNOP in the config") == [("api_token", "AKIAABCDEFGHIJKLMNOP")]


def test_ordinary_text_is_left_alone() -> None:
    for text in (
        "remember my size is L",
        "my budget is 5000 yuan",
        "the password reset link expired",
        "token based auth is fine",
        "order 12345678 shipped on 2026-11-30",
        "4111 1111 1111 1112",  # fails Luhn
        "110105194913310021",  # 18 digits, but month 13: no one's ID
    ):
        assert detect(text) == [], text


def test_card_is_not_also_a_phone_and_placeholders_are_not_detected() -> None:
    card = "622202138001380000" + luhn_digit("622202138001380000")  # holds a mobile number
    assert kinds(f"card {card}") == [("bank_card", card)]
    sealed = "call " + placeholder(PiiKind.PHONE, "h13800138000abcde")
    assert detect("h13800138000abcde") != []  # the token alone would look like a phone
    assert detect(sealed) == []
    assert placeholder_refs(sealed) == {"phone:h13800138000abcde"}


def test_international_prefix_is_a_phone_even_when_it_passes_luhn() -> None:
    number = next(
        f"13{n:09d}" for n in range(10_000) if luhn_valid(f"8613{n:09d}")
    )  # "86" + the mobile number passes Luhn: still a phone
    assert kinds(f"call +86 {number}") == [("phone", f"+86 {number}")]
    assert kinds(f"call +86{number}") == [("phone", f"+86{number}")]


def test_normalize_and_mask() -> None:
    assert normalize(PiiKind.PHONE, "+86 138-0013-8000") == "13800138000"
    assert normalize(PiiKind.PHONE, "13800138000") == "13800138000"
    assert normalize(PiiKind.PHONE, "+44 20 7946 0958") == "+442079460958"
    assert normalize(PiiKind.EMAIL, "A@Example.COM") == "a@example.com"
    assert normalize(PiiKind.BANK_CARD, CARD) == "4111111111111111"
    assert mask(PiiKind.PHONE, "13800138000") == "138****8000"
    assert mask(PiiKind.BANK_CARD, CARD) == "************1111"
    assert mask(PiiKind.EMAIL, "li@example.com") == "l***@example.com"
    assert "hunter2" not in mask(PiiKind.PASSWORD, "hunter2")


def test_policy_defaults_to_encrypt_and_overrides_per_tenant() -> None:
    policy = SecurityPolicy.model_validate(
        {"tenants": {"bank": {"actions": {"bank_card": "reject", "email": "mask"}}}}
    )
    assert policy.for_tenant("acme").action(PiiKind.BANK_CARD) is Action.ENCRYPT
    assert policy.for_tenant("bank").action(PiiKind.BANK_CARD) is Action.REJECT
    assert policy.for_tenant("bank").action(PiiKind.EMAIL) is Action.MASK
    assert policy.for_tenant("bank").action(PiiKind.PHONE) is Action.ENCRYPT
    assert PiiPolicy(default=Action.MASK).action(PiiKind.SENSITIVE) is Action.ENCRYPT
    with pytest.raises(ValueError, match="shred"):
        SecurityPolicy.model_validate({"default": {"actions": {"phone": "shred"}}})


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("记住我的邮箱是zhang.san@example.org", [("email", "zhang.san@example.org")]),
        ("我的电话+14155550199", [("phone", "+14155550199")]),
        (
            "邮箱zhang.san@example.org，电话+14155550199。",
            [
                ("email", "zhang.san@example.org"),
                ("phone", "+14155550199"),
            ],
        ),
        ("我的密钥sk-abcdefghijklmnop1234", [("api_token", "sk-abcdefghijklmnop1234")]),
    ],
)
def test_values_written_straight_after_chinese_text_are_found(
    text: str, found: list[tuple[str, str]]
) -> None:
    """Finding 5: with \\w in the look-behinds, a CJK character before the value hid it."""
    assert kinds(text) == found


def test_a_spaced_passphrase_is_sealed_whole() -> None:
    """Finding 5: only the first word of a passphrase was found."""
    assert kinds("my passphrase is correct horse battery staple") == [
        ("password", "correct horse battery staple")
    ]
    assert kinds("password: correct horse battery staple, remember it") == [
        ("password", "correct horse battery staple")
    ]
    assert kinds("密码是 open sesame 123。谢谢") == [("password", "open sesame 123")]
    assert kinds("my password is hunter2! Keep it safe.") == [("password", "hunter2!")]
    # without "is" or ":", only the word after the label, and never a plain word
    assert kinds("password hunter22 please") == [("password", "hunter22")]
    assert kinds("the password reset link expired") == []


def test_a_resident_id_with_a_wrong_check_character_is_still_found() -> None:
    """Finding 5: a mistyped ID number is still personal data."""
    wrong = ID[:-1] + ("0" if ID[-1] != "0" else "1")
    assert not cn_id_valid(wrong)
    assert kinds(f"身份证{wrong}") == [("id_number", wrong)]
    assert kinds(f"ID {wrong.lower()} on file") == [("id_number", wrong.lower())]
    # eighteen digits that pass Luhn are a card's, not a mistyped ID
    body = "62220219900101102"  # a region, a birth date, a sequence: shaped like an ID
    card = body + luhn_digit(body)
    assert not cn_id_valid(card)
    assert kinds(f"card {card}") == [("bank_card", card)]


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("电话１３８００１３８０００", PiiKind.PHONE, "１３８００１３８０００"),
        ("رقمي ١٣٨٠٠١٣٨٠٠٠ شكرا", PiiKind.PHONE, "١٣٨٠٠١٣٨٠٠٠"),
        ("call 138\u200b0013\u200b8000", PiiKind.PHONE, "138\u200b0013\u200b8000"),
        ("my number is 138.0013.8000", PiiKind.PHONE, "138.0013.8000"),
        ("card 4111.1111.1111.1111 please", PiiKind.BANK_CARD, "4111.1111.1111.1111"),
        ("身份证 110105 19491231 002X 谢谢", PiiKind.ID_NUMBER, "110105 19491231 002X"),
        ("mail zhang＠example.org now", PiiKind.EMAIL, "zhang＠example.org"),
        ("reach me at +1 (415) 555-0199", PiiKind.PHONE, "+1 (415) 555-0199"),
    ],
)
def test_values_in_other_written_forms_are_found_as_written(
    text: str, kind: PiiKind, value: str
) -> None:
    """Full-width, other scripts' digits, zero-width or dotted separators and grouped IDs
    read as the same value; the finding spans the original characters."""
    [found] = detect(text)
    assert (found.kind, found.value, text[found.start : found.end]) == (kind, value, value)


def test_a_value_in_another_written_form_hashes_like_its_ascii_form() -> None:
    assert normalize(PiiKind.PHONE, "１３８００１３８０００") == "13800138000"
    assert normalize(PiiKind.ID_NUMBER, "110105 19491231 002x") == "11010519491231002X"
    assert normalize(PiiKind.EMAIL, "Zhang＠Example.org") == "zhang@example.org"


@pytest.mark.parametrize("text", ["pi is 3.14159265358979", "version 10.2.13.4", "1.0.0.1"])
def test_dotted_numbers_that_are_no_card_or_phone_stay(text: str) -> None:
    assert detect(text) == []
