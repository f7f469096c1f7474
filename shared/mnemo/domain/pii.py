"""Sensitive values in free text, and what each tenant does with them.

`detect` finds, without any I/O:

* mainland China resident ID numbers (18 characters, a valid birth date; with the ISO 7064
  MOD 11-2 check character, or with a wrong one unless the digits pass Luhn as a card's),
* bank card numbers (13-19 digits, optionally grouped by spaces or dashes, passing Luhn),
* IBANs (country, check digits and account, optionally grouped by spaces, passing the
  ISO 13616 mod-97 check),
* US social security numbers (AAA-GG-SSSS or AAA GG SSSS, without the ranges never issued;
  nine bare digits only after "SSN" or "social security"),
* phone numbers (mainland mobile numbers with or without +86, E.164-style international
  numbers starting with '+', mainland landlines with their area code, "010-12345678",
  "(0755)8888-1234", and North American numbers with theirs, "(415) 555-0100"),
* e-mail addresses, internationalized ones included ("用户@例子.中国", "jörg@bücher.de",
  punycode "xn--" domains),
* passwords and API tokens, by context ("password: ...", "密码是...", "api key ...") or by
  their well-known shapes (sk-..., ghp_..., AKIA..., and Mnemo's own mnemo_<id>_...).

A tenant's `PiiPolicy` says per kind whether a value is encrypted (the default), masked,
or makes the whole event rejected. Encrypted values are replaced in the text by a
placeholder ``⟦<kind>:h<16 hex>⟧``; the hex is a keyed hash of the value, so the same
value gives the same placeholder and exact matches stay searchable (see docs/security.md).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "PLACEHOLDER",
    "REDACTED",
    "Action",
    "Finding",
    "PiiKind",
    "PiiPolicy",
    "SecurityPolicy",
    "cn_id_shaped",
    "cn_id_valid",
    "detect",
    "iban_valid",
    "luhn_valid",
    "mask",
    "mask_by_policy",
    "normalize",
    "placeholder",
    "placeholder_refs",
    "ssn_valid",
]


class PiiKind(StrEnum):
    ID_NUMBER = "id_number"
    BANK_CARD = "bank_card"
    PHONE = "phone"
    EMAIL = "email"
    IBAN = "iban"
    SSN = "ssn"
    PASSWORD = "password"  # noqa: S105 - the name of a kind, not a secret
    API_TOKEN = "api_token"  # noqa: S105 - the name of a kind, not a secret
    SENSITIVE = "sensitive"  # a whole field its schema (or the publisher) marks sensitive


class Action(StrEnum):
    ENCRYPT = "encrypt"
    MASK = "mask"
    REJECT = "reject"


@dataclass(frozen=True, slots=True)
class Finding:
    kind: PiiKind
    start: int
    end: int
    value: str


# ---- validators -----------------------------------------------------------------------

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def cn_id_check_char(first17: str) -> str:
    """The check character of a resident ID's first 17 digits (ISO 7064 MOD 11-2)."""
    total = sum(int(d) * w for d, w in zip(first17, _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11]


def cn_id_shaped(value: str) -> bool:
    """18 characters shaped like a mainland resident ID (a region that does not start with
    0, a real birth date), whatever its check character: a mistyped ID is still someone's."""
    value = value.upper()
    if len(value) != 18 or not value[:17].isdigit() or value[17] not in "0123456789X":
        return False
    if value[0] == "0":
        return False
    try:
        born = date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return 1900 <= born.year <= 2100


def cn_id_valid(value: str) -> bool:
    """An 18-character mainland resident ID: region, a real birth date, and the right
    check character."""
    return cn_id_shaped(value) and cn_id_check_char(value[:17]) == value[17].upper()


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum (card numbers) over a string of digits."""
    if not digits.isdigit() or len(digits) < 2:
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# the countries of the IBAN registry (ISO 13616)
_IBAN_COUNTRIES = frozenset(
    [
        "AD",
        "AE",
        "AL",
        "AT",
        "AZ",
        "BA",
        "BE",
        "BG",
        "BH",
        "BI",
        "BR",
        "BY",
        "CH",
        "CR",
        "CY",
        "CZ",
        "DE",
        "DJ",
        "DK",
        "DO",
        "EE",
        "EG",
        "ES",
        "FI",
        "FK",
        "FO",
        "FR",
        "GB",
        "GE",
        "GI",
        "GL",
        "GR",
        "GT",
        "HR",
        "HU",
        "IE",
        "IL",
        "IQ",
        "IS",
        "IT",
        "JO",
        "KW",
        "KZ",
        "LB",
        "LC",
        "LI",
        "LT",
        "LU",
        "LV",
        "LY",
        "MC",
        "MD",
        "ME",
        "MK",
        "MN",
        "MR",
        "MT",
        "MU",
        "NI",
        "NL",
        "NO",
        "OM",
        "PK",
        "PL",
        "PS",
        "PT",
        "QA",
        "RO",
        "RS",
        "RU",
        "SA",
        "SC",
        "SD",
        "SE",
        "SI",
        "SK",
        "SM",
        "SO",
        "ST",
        "SV",
        "TL",
        "TN",
        "TR",
        "UA",
        "VA",
        "VG",
        "XK",
        "YE",
    ]
)


def iban_valid(value: str) -> bool:
    """An IBAN (spaces allowed): two letters, two check digits, 11 to 30 letters or digits,
    and the ISO 13616 mod-97 check (the first four characters moved to the end, letters as
    10..35, leaves 1)."""
    compact = "".join(value.split()).upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact):
        return False
    if compact[:2] not in _IBAN_COUNTRIES:
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


def ssn_valid(value: str) -> bool:
    """A US social security number as issued: nine digits whose area is not 000, 666 or
    900-999, whose group is not 00 and whose serial is not 0000."""
    digits = "".join(ch for ch in value if ch.isdigit())
    if len(digits) != 9:
        return False
    area, group, serial = int(digits[:3]), int(digits[3:5]), int(digits[5:])
    return area not in (0, 666) and area < 900 and group != 0 and serial != 0


# ---- detection ------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"⟦([a-z_]+):(h[0-9a-f]{16})⟧")
REDACTED = "⟦redacted⟧"
# what a field sealed whole on a user stream reads in the log (mnemo.service.sealing)
SEALED_TEXT = "⟦sealed⟧"

# The look-behinds name ASCII characters only: a value written straight after Chinese text
# ("邮箱是zhang.san@example.org", "电话+14155550199") starts right there (with \w, which
# takes in every CJK character, it would be missed).
# Addresses may be internationalized (any script's letters, "用户@例子.中国"); the match is
# then trimmed where the address meets the surrounding text (`_email_span`).
_EMAIL = re.compile(r"(?<![\w.%+-])[\w.%+-]{1,64}@[^\W_][\w-]*(?:\.[^\W_][\w-]*)+")
_TLD = re.compile(r"[^\W\d_]{2,24}|xn--[a-z0-9-]{2,59}", re.IGNORECASE)
_CUES = "是为：:"
# An ID may be written in its groups (area, birth date, sequence): "110105 19491231 002X".
_ID = re.compile(r"(?<![0-9A-Za-z])[1-9]\d{5}[ -]?\d{8}[ -]?\d{3}[\dXx](?![0-9A-Za-z])")
# Digits grouped by spaces, dashes or dots ("4111.1111.1111.1111", "138.0013.8000").
_CARD = re.compile(
    r"(?<![\d+.-])\d(?:[ -]?\d){12,18}(?![\d])|(?<![\d.])\d{4}(?:\.\d{4}){2}\.\d{1,7}(?![\d.])"
)
_CN_MOBILE = re.compile(r"(?<![\d+])(?:(?:\+|00)?86[ .-]?)?1[3-9]\d(?:[ .-]?\d{4}){2}(?![\d])")
# Landlines: a mainland area code (0 and 2-3 digits, in brackets or before a dash or a
# space) and a local number of 7 or 8 digits; a North American area code (in brackets, or
# before a dash or a dot) and a 7-digit number (exchange and area start with 2-9).
_CN_LANDLINE = re.compile(r"(?<![\d.-])(?:\(0\d{2,3}\)\s?|0\d{2,3}[ -])\d{3,4}[ -]?\d{4}(?![\d-])")
_NANP = re.compile(r"(?<![\d.+-])(?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[-.])[2-9]\d{2}[-.]\d{4}(?![\d-])")
_IBAN = re.compile(r"(?i)(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?")
_SSN = re.compile(r"(?<![\d-])\d{3}(?P<sep>[- ])\d{2}(?P=sep)\d{4}(?![\d-])")
_SSN_CONTEXT = re.compile(
    r"(?i)(?:\bssn|social\s+security(?:\s+(?:number|no\.?|#))?)\s*(?:is|[:：#=])?\s*"
    r"(?P<value>\d{9})(?!\d)"
)
_E164 = re.compile(r"(?<![A-Za-z0-9_+])\+[1-9]\d{0,2}(?:[ .()-]{0,2}\d){6,13}(?!\d)")
# Written forms that read as the same characters: full-width letters, digits and signs
# ("１３８００１３８０００", "＠"), other scripts' decimal digits, and spaces of other
# widths or none (no-break, ideographic, zero-width) as separators. Each folds to one
# ASCII character, so a finding's place in the folded text is its place in the original.
_FOLD = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)} | dict.fromkeys(
    (0x00A0, 0x2007, 0x202F, 0x3000, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF), 0x20
)


def fold(text: str) -> str:
    """`text` with every character that reads as an ASCII one replaced by it (same length)."""
    if text.isascii():
        return text
    out = text.translate(_FOLD)
    if out.isascii():
        return out
    return "".join(
        str(unicodedata.decimal(ch)) if not ch.isascii() and ch.isdecimal() else ch for ch in out
    )


# Introduced by "is", ":", "=", "是" or "为", a secret runs to the end of its clause, spaces
# included (a passphrase is several words); else it is the one word after the label.
_SECRET_CONTEXT = re.compile(
    r"(?i)(?P<label>password|passwd|pwd|passcode|passphrase|密码|口令)"
    r"(?:\s*(?:is|was|[:：=]|是|为)\s*"
    r"(?P<phrase>[^\s，,。；;][^\n\r，,。；;]{2,127}?)(?=\s*(?:[\n\r，,。；;]|$)|(?<=[.!?])\s)"
    r"|\s+(?P<word>[^\s，,。；;]{3,128}))"
)
_TOKEN_CONTEXT = re.compile(
    r"(?i)(?P<label>api[ _-]?key|api[ _-]?token|access[ _-]?token|secret[ _-]?key|"
    r"auth[ _-]?token|bearer|token|密钥)"
    r"(?:\s*(?:is|was|[:：=]|是|为)\s*|\s+)(?P<value>[A-Za-z0-9_\-\.~+/=]{8,256})"
)
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:sk-[A-Za-z0-9_-]{16,}|(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{20,}|"
    # Mnemo's own API keys: mnemo_<16 hex>_<43 base64url>, the prefix in any case or dropped
    r"(?i:mnemo)_[0-9a-fA-F]{16}_[A-Za-z0-9_-]{43}|[0-9a-fA-F]{16}_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])|"
    r"AKIA[0-9A-Z]{16}|xox[abpors]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"
    r"\.[A-Za-z0-9_-]{10,})"
)
_WORDS = frozenset({"is", "was", "the", "my", "of", "for", "是", "为"})
# words that, all alone after "password is", say something about the password rather than
# being it ("the password is too weak")
_STATES = frozenset(
    [
        "set",
        "new",
        "old",
        "not",
        "now",
        "too",
        "bad",
        "ok",
        "okay",
        "fine",
        "wrong",
        "right",
        "correct",
        "incorrect",
        "invalid",
        "expired",
        "changed",
        "reset",
        "weak",
        "strong",
        "required",
        "missing",
        "empty",
        "same",
        "different",
        "very",
        "still",
        "also",
    ]
)
# cheap checks that let most texts skip the costlier patterns
_HAS_DIGIT = re.compile(r"\d")
_SHAPE_HINT = re.compile(r"sk-|gh[pos]_|github_pat_|AKIA|xox|eyJ|mnemo_")
_TOKEN_HINT = re.compile(r"(?i)key|token|bearer|secret|密钥")
_SECRET_HINT = re.compile(r"(?i)pass|pwd|密码|口令")
_SSN_HINT = re.compile(r"(?i)ssn|social")


def _cjk(ch: str) -> bool:
    return ord(ch) >= 0x2E80  # CJK radicals onwards: Han, kana, Hangul, full-width forms


def _email_span(match: str) -> tuple[int, int] | None:
    """Where the address is in a match of `_EMAIL`, or None when it is none. A local part
    written straight after Chinese text starts after it ("邮箱是zhang.san@...": the letters
    after the last CJK character), unless it is all in CJK ("用户@例子.中国"), when it
    starts after a cue ("是", "为", a colon); a domain that runs into Chinese text ends
    with its last ASCII label ("...@example.org谢谢")."""
    local, _, domain = match.partition("@")
    start = 0
    last_cjk = max((i for i, ch in enumerate(local) if _cjk(ch)), default=-1)
    if last_cjk >= 0:
        tail = local[last_cjk + 1 :]
        if any(ch.isascii() and ch.isalpha() for ch in tail):
            start = last_cjk + 1
        else:
            cue = max(local.rfind(c) for c in _CUES)
            start = cue + 1 if cue >= 0 else 0
    if start >= len(local) or not local[start:].strip(".%+-"):
        return None
    labels = domain.split(".")
    for i, label in enumerate(labels):
        if i and label[:1].isascii() and any(_cjk(ch) for ch in label):
            cut = next(n for n, ch in enumerate(label) if _cjk(ch))
            labels = [*labels[:i], label[:cut]]
            break
    labels = [label.rstrip("-") for label in labels]
    if len(labels) < 2 or not all(labels) or not _TLD.fullmatch(labels[-1]):
        return None
    return start, len(local) + 1 + len(".".join(labels))


def _digits(value: str) -> str:
    return "".join(ch for ch in fold(value) if ch.isdigit())


def _candidates(text: str) -> list[Finding]:
    found: list[Finding] = []
    has_digits = _HAS_DIGIT.search(text) is not None
    shapes = _TOKEN_SHAPES.finditer(text) if _SHAPE_HINT.search(text) else ()
    for m in shapes:
        found.append(Finding(PiiKind.API_TOKEN, m.start(), m.end(), m.group()))
    tokens = _TOKEN_CONTEXT.finditer(text) if has_digits and _TOKEN_HINT.search(text) else ()
    for m in tokens:
        value = m.group("value")
        if value.lower() in _WORDS or not any(ch.isdigit() for ch in value):
            continue  # "token based auth", "bearer tokens": words, not secrets
        found.append(Finding(PiiKind.API_TOKEN, m.start("value"), m.end("value"), value))
    secrets = _SECRET_CONTEXT.finditer(text) if _SECRET_HINT.search(text) else ()
    for m in secrets:
        group = "phrase" if m.group("phrase") is not None else "word"
        value = m.group(group)
        if value.lower() in _WORDS or (group == "word" and value.isalpha()):
            continue  # "password reset link": no "is" or ":" and a plain word
        if all(w in _STATES for w in value.rstrip(".!?").lower().split()):
            continue  # "the password is wrong", "password: expired"
        found.append(Finding(PiiKind.PASSWORD, m.start(group), m.end(group), value))
    for m in _EMAIL.finditer(text) if "@" in text else ():
        span = _email_span(m.group())
        if span is not None:
            start, end = m.start() + span[0], m.start() + span[1]
            found.append(Finding(PiiKind.EMAIL, start, end, text[start:end]))
    if not has_digits:
        return found
    for m in _IBAN.finditer(text):
        if iban_valid(m.group()):
            found.append(Finding(PiiKind.IBAN, m.start(), m.end(), m.group()))
    for m in _SSN.finditer(text):
        if ssn_valid(m.group()):
            found.append(Finding(PiiKind.SSN, m.start(), m.end(), m.group()))
    for m in _SSN_CONTEXT.finditer(text) if _SSN_HINT.search(text) else ():
        if ssn_valid(m.group("value")):
            found.append(Finding(PiiKind.SSN, m.start("value"), m.end("value"), m.group("value")))
    for m in _ID.finditer(text):
        # a wrong check character is a mistyped ID, unless the digits are a card's
        whole = re.sub(r"[ -]", "", m.group())
        if cn_id_valid(whole) or (cn_id_shaped(whole) and not luhn_valid(_digits(whole))):
            found.append(Finding(PiiKind.ID_NUMBER, m.start(), m.end(), m.group()))
    for m in _CARD.finditer(text):
        digits = _digits(m.group())
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            found.append(Finding(PiiKind.BANK_CARD, m.start(), m.end(), m.group()))
    for m in _CN_MOBILE.finditer(text):
        found.append(Finding(PiiKind.PHONE, m.start(), m.end(), m.group()))
    for m in _CN_LANDLINE.finditer(text):
        if 10 <= len(_digits(m.group())) <= 12:
            found.append(Finding(PiiKind.PHONE, m.start(), m.end(), m.group()))
    for m in _NANP.finditer(text):
        found.append(Finding(PiiKind.PHONE, m.start(), m.end(), m.group()))
    for m in _E164.finditer(text):
        digits = _digits(m.group())
        if 8 <= len(digits) <= 15:
            found.append(Finding(PiiKind.PHONE, m.start(), m.end(), m.group()))
    return found


_PRIORITY = {
    PiiKind.API_TOKEN: 0,
    PiiKind.PASSWORD: 1,
    PiiKind.EMAIL: 2,
    PiiKind.ID_NUMBER: 3,
    PiiKind.IBAN: 4,
    PiiKind.BANK_CARD: 5,
    PiiKind.SSN: 6,
    PiiKind.PHONE: 7,
    PiiKind.SENSITIVE: 8,
}


def detect(text: str) -> list[Finding]:
    """Every sensitive value in `text`, in text order, none overlapping another; existing
    placeholders are never detected again. Earlier kinds in the priority list win a
    contested span (a password that looks like a phone number stays a password)."""
    taken = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]
    chosen: list[Finding] = []
    folded = fold(text)  # same length: a span in it is the same span in `text`
    for f in sorted(_candidates(folded), key=lambda f: (_PRIORITY[f.kind], f.start, -f.end)):
        if any(f.start < end and start < f.end for start, end in taken):
            continue
        taken.append((f.start, f.end))
        chosen.append(Finding(f.kind, f.start, f.end, text[f.start : f.end]))
    return sorted(chosen, key=lambda f: f.start)


def normalize(kind: PiiKind, value: str) -> str:
    """The canonical form exact-match hashes are taken over: "+86 138-0013-8000" and
    "13800138000" are the same phone, "A@Example.com" and "a@example.com" the same mail."""
    if kind is PiiKind.PHONE:
        digits = _digits(value)
        if value.lstrip().startswith(("+", "00")):
            digits = digits[2:] if value.lstrip().startswith("00") else digits
            if digits.startswith("86") and len(digits) == 13:
                return digits[2:]
            return "+" + digits
        if digits.startswith("86") and len(digits) == 13:
            return digits[2:]
        return digits
    if kind is PiiKind.BANK_CARD:
        return _digits(value)
    if kind is PiiKind.ID_NUMBER:
        return re.sub(r"[ -]", "", fold(value)).upper()
    if kind is PiiKind.EMAIL:
        return fold(value).lower()
    if kind is PiiKind.IBAN:
        return "".join(fold(value).split()).upper()
    if kind is PiiKind.SSN:
        return _digits(value)
    return value


def mask(kind: PiiKind, value: str) -> str:
    """A masked form that keeps just enough to recognise the value, never to recover it."""
    if kind is PiiKind.PHONE:
        digits = _digits(value)
        return digits[:3] + "*" * max(0, len(digits) - 7) + digits[-4:]
    if kind is PiiKind.BANK_CARD:
        digits = _digits(value)
        return "*" * (len(digits) - 4) + digits[-4:]
    if kind is PiiKind.ID_NUMBER:
        return value[:2] + "*" * 12 + value[-4:]
    if kind is PiiKind.EMAIL:
        local, _, domain = value.partition("@")
        return local[:1] + "***@" + domain
    if kind is PiiKind.IBAN:
        compact = "".join(value.split()).upper()
        return compact[:2] + "*" * (len(compact) - 6) + compact[-4:]
    if kind is PiiKind.SSN:
        return "***-**-" + _digits(value)[-4:]
    return "******"


def placeholder(kind: PiiKind, token: str) -> str:
    """The text that stands in for an encrypted value: ⟦kind:token⟧."""
    return f"⟦{kind.value}:{token}⟧"


def placeholder_refs(text: str) -> set[str]:
    """The refs (kind:token) of every placeholder in a text."""
    return {f"{m.group(1)}:{m.group(2)}" for m in PLACEHOLDER.finditer(text)}


# ---- policy -------------------------------------------------------------------------------


class PiiPolicy(BaseModel):
    """One tenant's rules: an action per kind (encrypt unless said otherwise), and whether
    each user stream (`user:...`) gets a key of its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default: Action = Action.ENCRYPT
    actions: dict[PiiKind, Action] = Field(default_factory=dict)
    user_keys: bool = Field(
        default=True,
        description="user:<id> streams are sealed under their own key, so forgetting that "
        "user destroys it; other streams use the tenant's key",
    )

    def action(self, kind: PiiKind) -> Action:
        if kind is PiiKind.SENSITIVE:
            return Action.ENCRYPT  # a field marked sensitive is always sealed whole
        return self.actions.get(kind, self.default)


class SecurityPolicy(BaseModel):
    """Every tenant's PII policy: a default and per-tenant overrides (loaded from YAML)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default: PiiPolicy = PiiPolicy()
    tenants: dict[str, PiiPolicy] = Field(default_factory=dict)

    def for_tenant(self, tenant: str) -> PiiPolicy:
        return self.tenants.get(tenant, self.default)


def mask_by_policy(text: str, policy: PiiPolicy) -> str:
    """`text` with every value the policy masks (or rejects: text Mnemo reads on its own,
    such as a document's section, is never refused, its value is masked) replaced by its
    mask; values the policy encrypts stay for the caller to seal."""
    out: list[str] = []
    pos = 0
    for found in detect(text):
        if policy.action(found.kind) is Action.ENCRYPT:
            continue
        out += [text[pos : found.start], mask(found.kind, found.value)]
        pos = found.end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)
