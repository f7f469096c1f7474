"""LoCoMo data (Maharana et al., ACL 2024), read straight from the release zip, and the
disk cache of embeddings the LoCoMo benchmark keeps between runs."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from mnemo.ports import Embedder

__all__ = [
    "CATEGORIES",
    "CachingEmbedder",
    "Conversation",
    "Question",
    "Turn",
    "load_conversations",
]

# as the authors' evaluation code names them; category 5 (adversarial) is not scored
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str  # "D3:12"
    session: int
    date: str  # the session's date and time as the data gives it
    speaker: str
    text: str
    caption: str | None

    def content(self) -> str:
        """The memory content: "<date>: <speaker>: <text>" plus the shared photo."""
        shared = f" [shares {self.caption}]" if self.caption else ""
        return f"{self.date}: {self.speaker}: {self.text}{shared}"

    def plain_content(self) -> str:
        """What a plain chat client stores: "<speaker>: <text>" plus the shared photo, with
        no date (the date travels as the event time)."""
        shared = f" [shares {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{shared}"

    @property
    def when(self) -> datetime:
        """The session's date and time ("1:56 pm on 8 May, 2023"), read as UTC."""
        return datetime.strptime(self.date, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)

    @property
    def dia_tag(self) -> str:
        return "dia:" + self.dia_id.replace(":", "_")


@dataclass(frozen=True, slots=True)
class Question:
    conv: str
    index: int  # position in the conversation's qa list
    text: str
    category: int
    evidence: tuple[str, ...]  # distinct dia ids that exist in the conversation


@dataclass(frozen=True, slots=True)
class Conversation:
    cid: str  # the file's stem, e.g. "26"
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]  # scored ones only (categories 1-4, evidence exists)
    all_questions: int

    @property
    def stream(self) -> str:
        return f"conv:{self.cid}"

    def episode_tag(self, session: int) -> str:
        return f"episode:conv{self.cid}-s{session}"


def load_conversations(path: Path) -> list[Conversation]:
    """The ten conversations, in file-name order. A question is scored when its category is
    1-4 and at least one of its evidence ids names a turn of its conversation; its evidence
    is then the distinct ids that do (ids the data spells wrongly, such as "D8:6; D9:17",
    drop out): 1,531 questions."""
    out: list[Conversation] = []
    with zipfile.ZipFile(path) as zf:
        names = sorted(
            (n for n in zf.namelist() if n.endswith(".json")),
            key=lambda n: (len(Path(n).stem), Path(n).stem),
        )
        for name in names:
            data = json.loads(zf.read(name))
            cid = Path(name).stem
            sessions = sorted(
                int(m.group(1))
                for k, v in data.items()
                if (m := _SESSION.fullmatch(k)) and isinstance(v, list)
            )
            turns: list[Turn] = []
            for k in sessions:
                date = str(data.get(f"session_{k}_date_time") or "").strip()
                for t in data[f"session_{k}"]:
                    caption = t.get("blip_caption")
                    turns.append(
                        Turn(
                            dia_id=t["dia_id"],
                            session=k,
                            date=date,
                            speaker=t["speaker"],
                            text=t["text"],
                            caption=str(caption).strip() if caption else None,
                        )
                    )
            ids = {t.dia_id for t in turns}
            questions = []
            for i, qa in enumerate(data["qa"]):
                category = int(qa.get("category", 0))
                evidence = tuple(dict.fromkeys(e for e in qa.get("evidence", []) if e in ids))
                if category in CATEGORIES and evidence:
                    questions.append(Question(cid, i, str(qa["question"]), category, evidence))
            out.append(
                Conversation(
                    cid,
                    (str(data["speaker_a"]), str(data["speaker_b"])),
                    tuple(turns),
                    tuple(questions),
                    len(data["qa"]),
                )
            )
    return out


class CachingEmbedder(Embedder):
    """Looks vectors up in an on-disk cache keyed by sha256(embedder name, kind, text) and
    falls back to the real embedder (created only when a text is missing). Reports progress
    on stderr while it embeds passages."""

    def __init__(self, name: str, dim: int, path: Path, make_inner: Callable[[], Embedder]) -> None:
        self.name = name
        self.dim = dim
        self._make_inner = make_inner
        self._inner: Embedder | None = None
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, v BLOB)")
        self.hits = 0
        self.misses = 0
        self.embed_seconds = 0.0
        self.expected_passages = 0  # for progress lines
        self._done_passages = 0
        self._last_report = 0.0

    def _key(self, kind: str, text: str) -> str:
        return hashlib.sha256(f"{self.name}\x1f{kind}\x1f{text}".encode()).hexdigest()

    def _inner_embedder(self) -> Embedder:
        if self._inner is None:
            self._inner = self._make_inner()
        return self._inner

    def _lookup(self, keys: Sequence[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for start in range(0, len(keys), 500):
            part = list(keys[start : start + 500])
            marks = ",".join("?" * len(part))
            for key, blob in self._db.execute(
                f"SELECT key, v FROM vectors WHERE key IN ({marks})", part
            ):
                found[key] = np.frombuffer(blob, dtype=np.float32).tolist()
        return found

    def _store(self, pairs: Sequence[tuple[str, list[float]]]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
            [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in pairs],
        )
        self._db.commit()

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            keys = [self._key("passage", t) for t in texts]
            found = self._lookup(keys)
            missing = [i for i, k in enumerate(keys) if k not in found]
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            if missing:
                t0 = time.perf_counter()
                vectors = self._inner_embedder().embed_passages([texts[i] for i in missing])
                self.embed_seconds += time.perf_counter() - t0
                pairs = [(keys[i], v) for i, v in zip(missing, vectors, strict=True)]
                self._store(pairs)
                found.update(pairs)
            self._done_passages += len(texts)
            now = time.perf_counter()
            if self.expected_passages and now - self._last_report > 10:
                self._last_report = now
                print(
                    f"  embedded {self._done_passages}/{self.expected_passages} passages "
                    f"({self.misses} by the model so far, {self.embed_seconds:.0f}s in it)",
                    file=sys.stderr,
                    flush=True,
                )
            return [found[k] for k in keys]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            keys = [self._key("query", t) for t in texts]
            found = self._lookup(keys)
            missing = [i for i, k in enumerate(keys) if k not in found]
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            if missing:
                inner = self._inner_embedder()
                t0 = time.perf_counter()
                pairs = []
                for n, i in enumerate(missing, 1):
                    pairs.append((keys[i], inner.embed_query(texts[i])))
                    if n % 250 == 0:
                        print(
                            f"  embedded {n}/{len(missing)} queries",
                            file=sys.stderr,
                            flush=True,
                        )
                self.embed_seconds += time.perf_counter() - t0
                self._store(pairs)
                found.update(pairs)
            return [found[k] for k in keys]

    def close(self) -> None:
        self._db.close()
