"""The tuning bank: what was measured and which candidate won, per operator or subgraph signature.

Layout, one directory per device (``device.device_fingerprint``)::

    $TUNE_BANK_PATH/<fingerprint>/
      bank.json     the device facts and the library versions the bank was tuned under
      opat.json     operator (OPAT) entries   {"kind": "op", "entries": {key: entry}}
      sgat.json     subgraph (SGAT) entries   {"kind": "subgraph", "entries": {key: entry}}
      .lock         every write holds fcntl.flock on it, re-reads, then replaces the file atomically

Reads take no lock: files are only ever replaced whole (temp file, fsync, os.replace), never torn. In a
distributed run only rank 0 writes; other ranks read and ``put`` reports the mode without writing.

``put`` returns the seed's update modes; ``RepoSummary`` counts them as the seed's repo_summary does:

- add:         no strategy in the bank before, one written after;
- update:      a strategy in the bank before, a different one written after;
- reserve:     a strategy in the bank before, unchanged after (REPEAT_TUNE off, or the same winner again);
- unsatisfied: no strategy in the bank before and none after (no candidate beat the default; the entry is
               kept with winner None as a record of the attempt, which is not a strategy);
- hit = update + reserve (strategies found in the bank); total = add + update + reserve + unsatisfied.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from perfsight.errors import TuneBankError
from perfsight.tune.device import device_facts, device_fingerprint, library_versions
from perfsight.tune.env import TuneSettings, process_rank
from perfsight.jsonfile import write_json_atomic

KINDS = ("op", "subgraph")
STORES = {"op": "opat.json", "subgraph": "sgat.json"}
META = "bank.json"
LOCK = ".lock"
MODES = ("add", "update", "reserve", "unsatisfied")


@dataclass
class Entry:
    key: str
    kind: str
    signature: dict
    candidates: list[dict] = field(default_factory=list)  # {name, params, median_us, spread_us, samples, ok, reason}
    winner: str | None = None
    default_us: float | None = None
    winner_us: float | None = None
    versions: dict = field(default_factory=dict)
    created: str = ""
    updated: str = ""

    def winner_record(self) -> dict | None:
        """The winning candidate's record (name, mode, params, timings), or None when the default won."""
        if self.winner is None:
            return None
        return next((c for c in self.candidates if c.get("name") == self.winner), None)

    def strategy(self) -> tuple[str, str] | None:
        """The tuning strategy this entry holds (winner and its parameters), or None when the default won."""
        if self.winner is None:
            return None
        return self.winner, _canonical((self.winner_record() or {}).get("params"))


@dataclass
class RepoSummary:
    add: int = 0
    update: int = 0
    reserve: int = 0
    unsatisfied: int = 0

    def record(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"update mode {mode!r} is not one of {', '.join(MODES)}")
        setattr(self, mode, getattr(self, mode) + 1)

    @property
    def hit(self) -> int:
        return self.update + self.reserve

    @property
    def total(self) -> int:
        return self.add + self.update + self.reserve + self.unsatisfied

    def as_dict(self) -> dict:
        return {"repo_add_num": self.add, "repo_hit_num": self.hit, "repo_reserved_num": self.reserve,
                "repo_unsatisfied_num": self.unsatisfied, "repo_update_num": self.update,
                "total_num": self.total}


class Bank:
    def __init__(self, root: Path, fingerprint: str | None = None, *, read_only: bool = False):
        self._facts = None if fingerprint else device_facts()
        self.fingerprint = fingerprint or device_fingerprint(self._facts)
        self.directory = Path(root) / self.fingerprint
        self.read_only = read_only
        self.writes = process_rank() == 0
        self._versions: dict | None = None

    @classmethod
    def open(cls, settings: TuneSettings) -> Bank:
        """The bank of ``settings`` for this device (rank 0 of a distributed run writes; ``check_fresh``
        refuses one tuned under other library versions)."""
        bank = cls(settings.bank_path)
        bank.writes = settings.rank == 0
        return bank

    def key(self, kind: str, signature: dict) -> str:
        """A stable decimal 64-bit key (like the seed's repo_key) of the canonical JSON of ``signature``."""
        _check_kind(kind)
        digest = hashlib.sha256(f"{kind}\n{_canonical(signature)}".encode()).digest()
        return str(int.from_bytes(digest[:8], "big"))

    def get(self, kind: str, key: str) -> Entry | None:
        found = self._read_store(kind).get(key)
        return None if found is None else Entry(**found)

    def entries(self, kind: str) -> dict[str, Entry]:
        return {key: Entry(**value) for key, value in self._read_store(kind).items()}

    def recorded_versions(self) -> dict | None:
        meta = self._read_json(self.directory / META)
        return None if meta is None else meta.get("versions", {})

    def stale(self) -> list[str]:
        """What differs between the versions the bank was tuned under and the running ones (empty: fresh)."""
        recorded = self.recorded_versions()
        if recorded is None:
            return []
        running = self.running_versions()
        return [f"{name}: bank {recorded.get(name, 'absent')}, running {running.get(name, 'absent')}"
                for name in sorted(set(recorded) | set(running)) if recorded.get(name) != running.get(name)]

    def check_fresh(self) -> None:
        """Refuse a stale bank with a message naming the differences and what to do."""
        differences = self.stale()
        if differences:
            raise TuneBankError(f"the tuning bank {self.directory} was tuned under other library versions "
                                f"({'; '.join(differences)}): its results may not hold; re-tune into another "
                                "TUNE_BANK_PATH or remove this directory")

    def running_versions(self) -> dict:
        if self._versions is None:
            self._versions = library_versions()
        return self._versions

    def put(self, entry: Entry, *, repeat: bool) -> str:
        """Store ``entry`` and return its update mode (add, update, reserve or unsatisfied)."""
        _check_kind(entry.kind)
        if self.read_only:
            raise TuneBankError(f"the tuning bank {self.directory} is read-only: nothing can be stored in it")
        if not self.writes:
            return _mode(self.get(entry.kind, entry.key), entry, repeat)
        with self._locked():
            self.check_fresh()
            store = self._read_store(entry.kind)
            before = store.get(entry.key)
            before = None if before is None else Entry(**before)
            mode = _mode(before, entry, repeat)
            if mode in ("add", "update") or (mode == "unsatisfied" and (before is None or repeat)):
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                entry.versions = dict(self.running_versions())
                entry.created = before.created if before else (entry.created or now)
                entry.updated = now
                store[entry.key] = asdict(entry)
                self._write_meta_once()
                write_json_atomic(self.directory / STORES[entry.kind], {"kind": entry.kind, "entries": store})
            return mode

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write_meta_once(self) -> None:
        if not (self.directory / META).exists():
            meta = {"fingerprint": self.fingerprint, "versions": self.running_versions()}
            if self._facts is not None:
                meta["device"] = self._facts
            write_json_atomic(self.directory / META, meta)

    def _read_store(self, kind: str) -> dict:
        _check_kind(kind)
        found = self._read_json(self.directory / STORES[kind])
        return {} if found is None else found.get("entries", {})

    @staticmethod
    def _read_json(path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise TuneBankError(f"the tuning bank file {path} cannot be read ({error}): remove it to re-tune")


@dataclass(frozen=True)
class Rule:
    """A tuning rule proven by measurement, shipped read-only with perfsight (builtin_bank.json)."""
    name: str
    op: str
    when: str
    action: str
    speedup_min: float
    speedup_max: float
    measured: str


def builtin_rules() -> tuple[Rule, ...]:
    text = resources.files("perfsight.tune").joinpath("builtin_bank.json").read_text()
    return tuple(Rule(**rule) for rule in json.loads(text)["rules"])


def kept_mode(before: Entry | None) -> str:
    """The update mode of a signature whose tuning failed (nothing written): "reserve" when the bank held a
    strategy for it before, else "unsatisfied" (the seed's definitions of the two)."""
    return "reserve" if before is not None and before.strategy() is not None else "unsatisfied"


def _mode(before: Entry | None, after: Entry, repeat: bool) -> str:
    had = None if before is None else before.strategy()
    if had is None:
        return "unsatisfied" if after.winner is None else "add"
    if not repeat or after.strategy() == had:
        return "reserve"
    return "update"


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"bank kind {kind!r} is not one of {', '.join(KINDS)}")


def _canonical(value) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"a bank signature must be plain JSON (str, number, bool, None, list, dict): {error}")

