"""The labelled registration set and the benchmark's scoring helpers."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from bench.registration import T0, _same, _ttl_of, load_items


def test_the_set_holds_at_least_400_labelled_utterances_in_both_languages() -> None:
    items = load_items()
    assert len(items) >= 400
    langs = Counter(i.lang for i in items)
    assert langs["zh"] >= 200
    assert langs["en"] >= 190
    assert {i.domain for i in items} == {"cs", "fin", "pa"}
    assert {i.kind for i in items} == {"statement", "correction", "negation", "temporary", "none"}
    assert len({(i.lang, i.text) for i in items}) == len(items)  # no utterance twice
    assert all(i.context for i in items if i.kind == "correction")
    splits = Counter(i.split for i in items)
    assert min(splits.values()) > 0.4 * len(items)  # both halves are sizable


def test_ttls_and_values_compare_as_labelled() -> None:
    assert _ttl_of(T0, None) == "permanent"
    assert _ttl_of(T0, T0 + timedelta(hours=24)) == "24h"
    assert _ttl_of(T0, T0 + timedelta(days=7)) == "7d"
    assert _ttl_of(T0, T0.replace(hour=0, minute=0) + timedelta(days=1)) == "end_of_day"
    assert _ttl_of(T0, datetime(2026, 11, 23, tzinfo=UTC)) == "end_of_week"  # T0: a Wednesday
    assert _ttl_of(T0, datetime(2026, 12, 1, tzinfo=UTC)) == "end_of_month"
    assert _ttl_of(T0, T0 + timedelta(hours=5)) == "18000s"
    assert _same(
        ("fact", "budget", "500 dollars", "permanent"),
        ("fact", "budget", "500dollars", "permanent"),
    )
    assert not _same(("fact", "budget", "500", "permanent"), ("fact", "budget", "600", "permanent"))


def test_the_bench_sends_its_new_users_in_batches_the_api_accepts() -> None:
    from bench.registration import _batches

    from mnemo.service.app import MAX_SUBJECT_KEYS_PER_REQUEST

    events = [{"stream": f"user:item-{n // 3}", "n": n} for n in range(300)]  # 100 users
    batches = _batches(events)
    assert [e for b in batches for e in b] == events  # nothing lost, order kept
    assert all(len({e["stream"] for e in b}) <= MAX_SUBJECT_KEYS_PER_REQUEST for b in batches)
    assert len(batches) == 4
