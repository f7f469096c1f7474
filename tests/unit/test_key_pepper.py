"""Files several processes make on first start: processes started side by side on one
data directory (`make up` starts every component at once) all read the one API key pepper
that was made, never a file another process is still writing; the development key file
is made once, never replaced by an empty one."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from mnemo.adapters.local_key_vault import LocalKeyFileVault
from mnemo.bootstrap import PEPPER_FILE, key_pepper
from mnemo.domain.errors import InvalidInput
from mnemo.settings import MnemoSettings


def pepper_of(data: str, start: Any) -> bytes:
    start.wait(30)
    return key_pepper(MnemoSettings(data_dir=Path(data)))


def test_processes_starting_together_share_one_whole_pepper(tmp_path: Path) -> None:
    """Eight processes at once on each of 25 new data directories."""
    ctx = multiprocessing.get_context("fork")
    dirs = [tmp_path / f"d{i}" for i in range(25)]
    with ctx.Manager() as manager, ctx.Pool(8) as pool:
        for data in dirs:
            data.mkdir()
            start = manager.Event()
            waiting = [pool.apply_async(pepper_of, (str(data), start)) for _ in range(8)]
            start.set()
            peppers = {w.get(60) for w in waiting}
            assert len(peppers) == 1, peppers
            [pepper] = peppers
            assert len(pepper) == 64
            kept = data / PEPPER_FILE
            assert kept.read_text(encoding="ascii").strip().encode() == pepper
            assert stat.S_IMODE(kept.stat().st_mode) == 0o600
            assert [p.name for p in data.iterdir()] == [PEPPER_FILE]  # no draft left


def test_a_damaged_pepper_file_is_refused_not_replaced(tmp_path: Path) -> None:
    """Replacing it would orphan every key hashed with it: the operator decides."""
    (tmp_path / PEPPER_FILE).write_text("short\n", encoding="ascii")
    with pytest.raises(InvalidInput) as damaged:
        key_pepper(MnemoSettings(data_dir=tmp_path))
    assert damaged.value.code == "INVALID_SETTING"
    assert "short" not in str(damaged.value)  # a secret, even a damaged one, stays out
    assert (tmp_path / PEPPER_FILE).read_text(encoding="ascii") == "short\n"


def test_a_set_pepper_is_used_and_a_short_one_refused(tmp_path: Path) -> None:
    given = MnemoSettings(data_dir=tmp_path, key_pepper="p" * 16)
    assert key_pepper(given) == b"p" * 16
    assert not (tmp_path / PEPPER_FILE).exists()
    # the settings refuse a short one before anything starts ...
    with pytest.raises(ValidationError, match="at least 16"):
        MnemoSettings(data_dir=tmp_path, key_pepper="p" * 15)
    # ... and the pepper itself still does, whatever built the settings
    built = MnemoSettings.model_construct(data_dir=tmp_path, key_pepper=SecretStr("p" * 15))
    with pytest.raises(InvalidInput) as short:
        key_pepper(built)
    assert short.value.code == "INVALID_SETTING"


def test_a_key_file_made_meanwhile_by_another_process_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that looked for the development key file before another one made its
    first key opens that file; it never writes an empty one over it."""
    path = tmp_path / "keys" / "vault.json"
    first = LocalKeyFileVault(path)
    wrapped = first.data_key("user:U1")[1]
    monkeypatch.setattr(Path, "exists", lambda self: False)  # it looked before the key
    late = LocalKeyFileVault(path)
    monkeypatch.undo()
    assert late.has_key("user:U1")
    assert late.unwrap("user:U1", wrapped) == first.unwrap("user:U1", wrapped)
    # no draft left (the lock file is where processes sharing the key file take turns)
    assert sorted(p.name for p in path.parent.iterdir()) == ["vault.json", "vault.json.lock"]
