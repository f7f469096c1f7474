"""The history bench's generator: seeded, long, both languages, and a question set whose
answers come from the ground truth (each evidence turn says its answer)."""

from __future__ import annotations

from bench.history import _holds
from bench.history_data import conversations


def test_the_same_seed_gives_the_same_conversations_and_another_seed_others() -> None:
    first, again, other = conversations(5, 4), conversations(5, 4), conversations(6, 4)
    assert [(c.turns, c.questions) for c in first] == [(c.turns, c.questions) for c in again]
    assert [c.turns for c in first] != [c.turns for c in other]


def test_conversations_are_long_bilingual_and_mostly_small_talk() -> None:
    convs = conversations(20, 6)
    assert {c.language for c in convs} == {"zh", "en"}
    assert min(len(c.turns) for c in convs) >= 100
    for conv in convs:
        evidence = {i for q in conv.questions for i in q.evidence}
        assert len(evidence) < len(conv.turns) / 4
        kinds = {q.kind for q in conv.questions}
        assert {"order_id", "tracking", "preference"} <= kinds


def test_each_question_is_answered_by_its_evidence_turn() -> None:
    kinds: set[str] = set()
    for conv in conversations(20, 8):
        for q in conv.questions:
            kinds.add(q.kind)
            [at] = q.evidence
            said = conv.turns[at].text
            assert any(form in said for form in q.forms[1:] or q.forms), (q, said)
            if q.kind in ("delay", "compensation", "preference", "tracking", "order_id"):
                assert q.answer == q.forms[0]
    assert kinds == {"order_id", "delay", "compensation", "refund_state", "tracking", "preference"}


def test_a_preference_question_asks_for_the_last_value_said() -> None:
    for conv in conversations(3, 4):
        for q in (q for q in conv.questions if q.kind == "preference"):
            [at] = q.evidence
            later = [t.text for t in conv.turns[at + 1 :]]
            # the topic's value is not changed again after its evidence turn
            same_topic = "联系" if "联系" in q.text else "送货" if "送货" in q.text else None
            if same_topic is not None:
                assert not any(same_topic in t and ("改" in t or "用" in t) for t in later)


def test_a_fact_holds_an_answer_only_as_a_field_value() -> None:
    [q] = [q for q in conversations(20, 1)[0].questions if q.kind == "delay"][:1]
    assert _holds(f"[Complaint] order=x delay={q.answer}", q)
    assert not _holds(f"[Complaint] order=x note{q.answer}", q)
