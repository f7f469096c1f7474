"""Stream names, and the names a client puts into URLs."""

from __future__ import annotations

import pytest

from mnemo.client._core import seg, shown_url
from mnemo.domain.ids import valid_stream


@pytest.mark.parametrize("name", ["user:U7892", "session:s1", "team:ops", "User-guide", "users:x"])
def test_stream_names_that_are_valid(name: str) -> None:
    assert valid_stream(name)


@pytest.mark.parametrize("name", ["USER:V1", "User:V1", "uSeR:x", "..", "", "user V1"])
def test_a_user_stream_spelled_in_another_case_is_no_stream(name: str) -> None:
    assert not valid_stream(name)


@pytest.mark.parametrize(("name", "escaped"), [("..", "%2E%2E"), (".", "%2E"), ("a.b", "a.b")])
def test_a_segment_of_dots_is_escaped_so_the_url_keeps_it(name: str, escaped: str) -> None:
    assert seg(name) == escaped


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pw@127.0.0.1:8080/x", "http://127.0.0.1:8080/x"),
        ("https://token@mnemo.example", "https://mnemo.example"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ],
)
def test_errors_show_a_url_without_its_user_and_password(url: str, shown: str) -> None:
    assert shown_url(url) == shown
