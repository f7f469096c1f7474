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
    mnemo_key = "mnemo_0123456789abcdef_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v"
    assert kinds(f"the globex key is {mnemo_key}, keep it") == [("api_token", mnemo_key)]


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


# ---- internationalized e-mail, short passwords, IBANs, SSNs, landlines -------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("我的邮箱是 用户@例子.中国 谢谢", "用户@例子.中国"),
        ("邮箱是用户@例子.中国", "用户@例子.中国"),
        ("schreib an jörg@bücher.de bitte", "jörg@bücher.de"),
        ("mail: Jörg.Müller@Bücher.de.", "Jörg.Müller@Bücher.de"),
        ("send it to user@xn--fsqu00a.xn--fiqs8s today", "user@xn--fsqu00a.xn--fiqs8s"),
        ("contact: info@xn--bcher-kva.de", "info@xn--bcher-kva.de"),
        ("почта иван@пример.рф", "иван@пример.рф"),
        ("邮箱zhang.san@example.org谢谢", "zhang.san@example.org"),
    ],
)
def test_internationalized_email_addresses_are_found(text: str, value: str) -> None:
    assert kinds(text) == [("email", value)]


@pytest.mark.parametrize(
    "text",
    [
        "npm install lodash@4.17.21",  # a version, not a domain
        "ping @张三 明天见",
        "meet me @ 5pm",
        "x@y.z",  # a one-letter top-level domain is no address
    ],
)
def test_at_signs_that_are_no_address_stay(text: str) -> None:
    assert detect(text) == [], text


def test_three_character_passwords_are_sealed() -> None:
    assert kinds("password: a1!") == [("password", "a1!")]
    assert kinds("密码是a1b") == [("password", "a1b")]
    assert kinds("my pwd is 7Qz, thanks") == [("password", "7Qz")]
    assert kinds("口令：x9y。") == [("password", "x9y")]
    # what is said about a password is not one
    for text in (
        "the password is wrong",
        "my password is set",
        "password: expired",
        "the password is too weak, pick another",
    ):
        assert detect(text) == [], text


IBANS = (
    "DE89 3704 0044 0532 0130 00",
    "GB82WEST12345698765432",
    "FR14 2004 1010 0505 0001 3M02 606",
    "NL91ABNA0417164300",
    "de89370400440532013000",
)


def test_iban_mod_97() -> None:
    from mnemo.domain.pii import iban_valid

    for iban in IBANS:
        assert iban_valid(iban), iban
    assert not iban_valid("DE89 3704 0044 0532 0130 01")  # one digit changed
    assert not iban_valid("DE88 3704 0044 0532 0130 00")  # check digits changed
    assert not iban_valid("ZZ89 3704 0044 0532 0130 00")  # no such country


@pytest.mark.parametrize("iban", IBANS)
def test_ibans_are_found(iban: str) -> None:
    assert kinds(f"please refund to {iban} thanks") == [("iban", iban)]
    assert kinds(f"退款账户{iban}，谢谢") == [("iban", iban)]


def test_iban_normalize_and_mask() -> None:
    assert normalize(PiiKind.IBAN, "de89 3704 0044 0532 0130 00") == "DE89370400440532013000"
    assert mask(PiiKind.IBAN, "DE89 3704 0044 0532 0130 00") == "DE" + "*" * 16 + "3000"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("my SSN is 123-45-6789", "123-45-6789"),
        ("ssn 123 45 6789 on file", "123 45 6789"),
        ("Social Security number: 123456789.", "123456789"),
        ("SSN#078051121", "078051121"),
    ],
)
def test_us_social_security_numbers_are_found(text: str, value: str) -> None:
    assert kinds(text) == [("ssn", value)]


@pytest.mark.parametrize(
    "text",
    [
        "my SSN is 000-12-3456",  # area 000 is never issued
        "my SSN is 666-12-3456",  # nor 666
        "my SSN is 912-34-5678",  # nor 900-999
        "my SSN is 123-00-4567",  # nor group 00
        "my SSN is 123-45-0000",  # nor serial 0000
        "123-45 6789",  # mixed separators
        "order 123456789 shipped",  # nine bare digits without a cue
    ],
)
def test_numbers_that_are_no_ssn_stay(text: str) -> None:
    assert [f for f in detect(text) if f.kind is PiiKind.SSN] == [], text


def test_ssn_normalize_and_mask() -> None:
    assert normalize(PiiKind.SSN, "123 45 6789") == "123456789"
    assert mask(PiiKind.SSN, "123-45-6789") == "***-**-6789"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("办公室电话010-12345678", "010-12345678"),
        ("座机：(0755)8888-1234", "(0755)8888-1234"),
        ("座机（0755）8888-1234，工作日", "（0755）8888-1234"),
        ("call 0571 8765 4321 after 9", "0571 8765 4321"),
        ("office (415) 555-0100", "(415) 555-0100"),
        ("office 415-555-0100 or email", "415-555-0100"),
        ("dial 415.555.0100", "415.555.0100"),
        ("Berlin office +49 30 12345678", "+49 30 12345678"),
        ("Paris +33 1 23 45 67 89", "+33 1 23 45 67 89"),
        ("London landline +44 20 7946 0958", "+44 20 7946 0958"),
    ],
)
def test_landlines_with_area_codes_are_found(text: str, value: str) -> None:
    assert kinds(text) == [("phone", value)]


@pytest.mark.parametrize(
    "text",
    [
        "delivered on 2026-11-30",
        "the meeting is on 12/03/2026 at 10:30",
        "order #2026-1130-0042 is late",
        "order no. 88812345 shipped",
        "it costs 1,234,567.89 yuan",
        "price 4,999.00 USD, was 5,999.00",
        "version 10.2.13.4",
        "release 2.14.1-rc3 and 3.0.0",
        "build 20261130.1245",
        "ticket ABC-123-4567 opened",
        "tracking number 1Z999AA10123456784",
        "call me between 9-10am on 2026/12/03",
        "the budget is 5000-8000 yuan",
        "room 1203, building 7, 100 people",
        "ratio 0.755-0.812",
    ],
)
def test_dates_order_numbers_amounts_and_versions_are_not_sealed(text: str) -> None:
    assert detect(text) == [], text
