"""Chinese numerals to digits for registration's value normalization, through `cn2an`.

Only extracted values go through it (五千元 -> 5000元, 百分之二十 -> 20%, 三十八码 -> 38码),
never whole utterances: `cn2an` would also turn the 一 of 记一下 into a digit.
"""

from __future__ import annotations

import re

import cn2an

__all__ = ["arabic_numerals"]

_NUMERAL = re.compile("[零〇一二两三四五六七八九十百千万亿点]")


def arabic_numerals(value: str) -> str:
    """`value` with its Chinese numerals written as digits; unchanged when it has none or
    cn2an cannot read them."""
    if not _NUMERAL.search(value):
        return value
    try:
        result = cn2an.transform(value, "cn2an")
    except (ValueError, KeyError, IndexError):
        return value
    return str(result)
