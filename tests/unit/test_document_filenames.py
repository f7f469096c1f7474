"""A document's file name is shown back (the CLI, the console, logs): characters that
could rewrite how it or the terminal around it looks are refused."""

from __future__ import annotations

import pytest

from mnemo.domain.errors import InvalidInput
from mnemo.service.documents import _filename


@pytest.mark.parametrize(
    "name",
    [
        "a\x00b.txt",
        "a\nb.txt",
        "a\x7fb.txt",  # DEL
        "a\x9b31mb.txt",  # C1 CSI: a terminal escape sequence on some terminals
        "\u202etxt.exe",  # right-to-left override: shows as exe.txt
        "report\u2066.pdf",
        "a\u2028b.txt",  # line separator
        "x" * 257,
        "   ",
    ],
)
def test_unfit_file_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _filename(name)
    assert info.value.code == "INVALID_FILENAME"
    assert info.value.field == "filename"


@pytest.mark.parametrize(
    "name", ["合同 2023.pdf", "合同\u30002023.docx", "naïve résumé.md", "🙂 notes.txt", "a" * 256]
)
def test_ordinary_file_names_pass(name: str) -> None:
    assert _filename(f" {name} ") == name
