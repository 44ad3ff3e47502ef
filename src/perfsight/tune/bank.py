"""The tuning bank: what was measured and which candidate won, per operator or subgraph signature.

Layout, one directory per device (``device.device_fingerprint``)::

    $TUNE_BANK_PATH/<fingerprint>/
      bank.json     the device facts and the library versions the bank was tuned under
      opat.json     operator (OPAT) entries   {"kind": "op", "entries": {key: entry}}
      sgat.json     subgraph (SGAT) entries   {"kind": "subgraph", "entries": {key: entry}}
      step.json     step settings (perfsight's: optimizer implementations, data-loader workers, TunableOp)
                                              {"kind": "step", "entries": {key: entry}}
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

A winner the stages found is written only once it won in the training step (tune/prove.py): the stages tune
into a ``StagedBank``, which keeps their entries in memory over the directory's, and ``commit`` writes them,
each rejected winner as an entry without a strategy that keeps the candidate and the figures that rejected it
(``Entry.rejected``): unsatisfied when the bank held no strategy for it before, as the seed counts a
signature no candidate improved.

Every read of a bank file - tuning into it, applying it (``perfsight.tuned``, ``apply_bank``, TUNE_BANK_PATH
at run time), ``perfsight tune --verify`` - decodes it here, typed (msgspec), against the shapes above:
a file that is not JSON or not of its shape (a list for an object, an entry missing a key, a value of
another type, a winner that is none of its candidates, an entry under another key or kind, a value nested
deeper than ``core/json_depth`` reads), or a directory or a FIFO where a file should be (read as
``core/files`` reads: never waited on, the lock file too), raises a ``TuneBankError`` naming the file, the
entry and what is allowed, and nothing is written over it. Staleness (``stale``) compares the running
library versions with bank.json's and with each entry's; stores without a bank.json are refused, since the
versions they were tuned under cannot be told.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypedDict

import msgspec
import msgspec.inspect

from perfsight.core.errors import TuneBankError
from perfsight.core.files import UnreadableFile, open_regular, read_regular
from perfsight.core.json_depth import JsonTooDeep, check_depth
from perfsight.core.jsonfile import write_json_atomic
from perfsight.tune.device import device_facts, device_fingerprint, library_versions
from perfsight.tune.env import TuneSettings, process_rank

KINDS = ("op", "subgraph", "step")
STORES = {"op": "opat.json", "subgraph": "sgat.json", "step": "step.json"}
META = "bank.json"
LOCK = ".lock"
MODES = ("add", "update", "reserve", "unsatisfied")


class CandidateRecord(TypedDict, total=False):
    """One candidate's record in an entry (measure.Timing.as_dict); the default's params hold the timing
    conditions."""
    name: str
    mode: str
    params: dict[str, Any] | None
    median_us: float | None
    spread_us: float | None
    samples: int
    ok: bool
    reason: str
    compile_s: float | None
    repays: bool | None


@dataclass
class Entry:
    key: str
    kind: Literal["op", "subgraph", "step"]
    signature: dict
    candidates: list[CandidateRecord] = field(default_factory=list)
    winner: str | None = None
    default_us: float | None = None
    winner_us: float | None = None
    versions: dict = field(default_factory=dict)
    created: str = ""
    updated: str = ""
    #: a winner its stage found that lost in the training step (``tune/prove.py``): the candidate, its per-call
    #: times and the in-step trial's figures; the entry then holds no strategy (winner None)
    rejected: dict | None = None

    def winner_record(self) -> dict | None:
        """The winning candidate's record (name, mode, params, timings), or None when the default won."""
        if self.winner is None:
            return None
        return next((c for c in self.candidates if c.get("name") == self.winner), None)

    def winner_params(self) -> dict:
        """The winning candidate's params ({} when the default won or the record has none)."""
        return (self.winner_record() or {}).get("params") or {}

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

    def move(self, before: str, after: str) -> None:
        """One signature counted as ``before`` counts as ``after`` now (a winner the training step rejected)."""
        if before != after:
            self.record(after)
            setattr(self, before, getattr(self, before) - 1)

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


class _Meta(msgspec.Struct):
    """bank.json."""
    versions: dict[str, str]
    fingerprint: str = ""
    device: dict[str, Any] | None = None


class _Store(msgspec.Struct):
    """opat.json, sgat.json or step.json; each entry is decoded on its own, so that an error names it."""
    kind: Literal["op", "subgraph", "step"]
    entries: dict[str, msgspec.Raw]


def allowed(shape: type, *, leave_out: tuple[str, ...] = ()) -> str:
    """What JSON ``shape`` (a msgspec Struct, dataclass or TypedDict) allows, for an error message: its
    fields and what each may hold, the required ones said so."""
    info = msgspec.inspect.type_info(shape)
    return "an object {" + ", ".join(f'"{f.name}"{" (required)" if f.required else ""}: {_holds(f.type)}'
                                     for f in info.fields if f.name not in leave_out) + "}"


_NAMES = {msgspec.inspect.NoneType: "null", msgspec.inspect.BoolType: "true or false",
          msgspec.inspect.StrType: "a string", msgspec.inspect.IntType: "an integer",
          msgspec.inspect.FloatType: "a number", msgspec.inspect.RawType: "an entry",
          msgspec.inspect.AnyType: "any value"}  # every other kind: "an object"


def _holds(kind: msgspec.inspect.Type) -> str:
    if isinstance(kind, msgspec.inspect.UnionType):
        return " or ".join(map(_holds, kind.types))
    if isinstance(kind, msgspec.inspect.LiteralType):
        return " or ".join(map(json.dumps, kind.values))
    if isinstance(kind, msgspec.inspect.IntType) and kind.ge is not None:
        return f"an integer >= {kind.ge}"
    if isinstance(kind, msgspec.inspect.ListType):
        return "a list of " + _holds(kind.item_type).split(" ", 1)[-1] + "s"
    if isinstance(kind, msgspec.inspect.DictType) and not isinstance(kind.value_type, msgspec.inspect.AnyType):
        return f"{{name: {_holds(kind.value_type)}}}"
    return _NAMES.get(type(kind), "an object")


_ALLOWED = {META: allowed(_Meta), "store": allowed(_Store).replace("an object {", "{", 1)
            + "; each entry " + allowed(Entry)}


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
        return self._read_store(kind).get(key)

    def entries(self, kind: str) -> dict[str, Entry]:
        return self._read_store(kind)

    def recorded_versions(self) -> dict | None:
        """bank.json's library versions; None for a bank with no files yet. Stores without a bank.json
        are refused: the versions they were tuned under cannot be told."""
        meta = self._decode(self.directory / META, _Meta)
        if meta is not None:
            return meta.versions
        stores = [name for name in STORES.values() if (self.directory / name).exists()]
        if stores:
            raise TuneBankError(f"the tuning bank {self.directory} has {' and '.join(stores)} but no {META}, which "
                                "records the library versions it was tuned under: whether its entries hold for "
                                "the running ones cannot be told; tune again into another TUNE_BANK_PATH (or "
                                "move this directory away)")
        return None

    def stale(self) -> list[str]:
        """What differs between the versions the bank, or its entries, were tuned under and the running
        ones (empty: fresh)."""
        recorded = self.recorded_versions()
        if recorded is None:
            return []
        running = self.running_versions()
        if recorded != running:
            return _differences(recorded, running)
        found = []
        for kind in KINDS:
            others = Counter(_canonical(e.versions) for e in self.entries(kind).values() if e.versions != running)
            found += [f"{n} entries of {STORES[kind]}: {', '.join(_differences(json.loads(text), running))}"
                      for text, n in sorted(others.items())]
        return found

    def check_fresh(self) -> None:
        """Refuse a stale bank with a message naming the differences and what to do."""
        differences = self.stale()
        if differences:
            raise TuneBankError(f"the tuning bank {self.directory} was tuned under other library versions "
                                f"({'; '.join(differences)}): its results may not hold; re-tune into another "
                                "TUNE_BANK_PATH or remove this directory")

    def winner_as(self, entry: Entry, shape: type, **given):
        """``entry``'s winner as ``shape`` (a msgspec Struct or dataclass) made of ``given`` and its winner
        record's params: a TuneBankError names the file, the entry, its params and what is allowed."""
        params = entry.winner_params()
        try:
            return msgspec.convert({**given, **params}, shape)
        except msgspec.ValidationError as error:
            problem = f"entry {entry.key!r}: its winner {entry.winner!r} has params {json.dumps(params)}: {error}"
            raise _damaged(self.directory / STORES[entry.kind], problem, allowed(shape, leave_out=tuple(given))) \
                from None

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
            mode = _mode(before, entry, repeat)
            if mode in ("add", "update") or (mode == "unsatisfied" and (before is None or repeat)):
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                entry.versions = dict(self.running_versions())
                entry.created = before.created if before else (entry.created or now)
                entry.updated = now
                store[entry.key] = entry
                self._write_meta_once()
                write_json_atomic(self.directory / STORES[entry.kind],
                                  {"kind": entry.kind, "entries": {k: asdict(e) for k, e in store.items()}})
            return mode

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            lock = open_regular(self.directory / LOCK, create=True)
        except UnreadableFile as error:
            raise _unreadable(self.directory / LOCK, error) from None
        with lock:
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

    def _read_store(self, kind: str) -> dict[str, Entry]:
        _check_kind(kind)
        path = self.directory / STORES[kind]
        store = self._decode(path, _Store)
        if store is None:
            return {}
        shape = _ALLOWED["store"]
        if store.kind != kind:
            raise _damaged(path, f"kind {store.kind!r} in {path.name}, which holds kind {kind!r}", shape)
        entries = {}
        for key, raw in store.entries.items():
            try:
                found = msgspec.json.decode(raw, type=Entry)
            except msgspec.ValidationError as error:
                raise _damaged(path, f"entry {key!r}: {error}", shape) from None
            names = [c.get("name") for c in found.candidates]
            problem = (f"it holds key {found.key!r}" if found.key != key else
                       f"it holds kind {found.kind!r}" if found.kind != kind else
                       f"its winner {found.winner!r} is not one of its candidates ({', '.join(map(str, names))})"
                       if found.winner is not None and found.winner not in names else "")
            if problem:
                raise _damaged(path, f"entry {key!r}: {problem}", shape)
            entries[key] = found
        return entries

    @staticmethod
    def _decode(path: Path, shape: type):
        """``path`` decoded as ``shape``, None when it does not exist; a TuneBankError when it is damaged, is
        not a regular file (a FIFO is never waited on) or nests deeper than ``json_depth.MAX_JSON_DEPTH``."""
        try:
            data = read_regular(path)
        except UnreadableFile as error:
            if error.missing:
                return None
            raise _unreadable(path, error) from None
        except OSError as error:
            raise _unreadable(path, error) from None
        allowed = _ALLOWED.get(path.name, _ALLOWED["store"])
        try:
            check_depth(data, path.name)
            return msgspec.json.decode(data, type=shape)
        except JsonTooDeep as error:
            raise _damaged(path, error.reason, allowed) from None
        except msgspec.DecodeError as error:
            raise _damaged(path, str(error), allowed) from None


class StagedBank(Bank):
    """``base`` with the entries ``put`` into it kept in memory, over the directory's (``pending``), until
    ``commit``; ``view(keys)`` is the same bank with only those pending winners (the others as no winner), for
    the steps of an in-step trial."""

    def __init__(self, base: Bank):
        self.__dict__.update(base.__dict__)
        self.base = base
        self.pending: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
        self.only: frozenset[str] | None = None

    def put(self, entry: Entry, *, repeat: bool) -> str:
        _check_kind(entry.kind)
        self.pending[entry.kind][entry.key] = entry
        return _mode(self.base.get(entry.kind, entry.key), entry, repeat)

    def get(self, kind: str, key: str) -> Entry | None:
        return self.entries(kind).get(key)

    def entries(self, kind: str) -> dict[str, Entry]:
        pending = self.pending[kind]
        if self.only is not None:
            pending = {k: e if k in self.only else replace(e, winner=None) for k, e in pending.items()}
        return {**self.base.entries(kind), **pending}

    def view(self, keys: frozenset[str]) -> StagedBank:
        shown = StagedBank(self.base)
        shown.pending, shown.only = self.pending, frozenset(keys)
        return shown

    def commit(self, rejected: dict[str, dict], *, repeat: bool) -> dict[str, str]:
        """Write every pending entry into ``base``; those whose key is in ``rejected`` without their winner,
        ``rejected[key]`` (the in-step figures) kept with the candidate's own. Returns key -> update mode."""
        modes = {}
        for kind in KINDS:
            for key, entry in self.pending[kind].items():
                if key in rejected and entry.winner is not None:
                    entry = replace(entry, winner=None, winner_us=None, rejected={
                        "winner": entry.winner, "default_us": entry.default_us, "winner_us": entry.winner_us,
                        **rejected[key]})
                modes[key] = self.base.put(entry, repeat=repeat)
        self.pending = {kind: {} for kind in KINDS}
        return modes


def device_banks(root: Path) -> list[Bank]:
    """This device's banks under ``root`` (read-only), whatever thread count the script will run at: a
    CPU's fingerprint holds torch's intra-op thread count, which a script may set before its first
    forward, so each count from 1 to the CPU count (or torch's current one, if higher) is looked for."""
    facts = device_facts()
    counts = [None] if facts["kind"] != "cpu" else range(1, max(os.cpu_count() or 1, facts["threads"]) + 1)
    names = dict.fromkeys(device_fingerprint(facts if n is None else {**facts, "threads": n}) for n in counts)
    return [Bank(root, name, read_only=True) for name in names if (Path(root) / name).exists()]


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


def settled(before: Entry | None) -> str | None:
    """The update mode of a signature the stages do not tune again without REPEAT_TUNE: "reserve" when the
    bank holds a strategy for it, "unsatisfied" when it holds a winner rejected in the training step (the
    record of that trial is its answer), None when it is to be tuned."""
    if before is None:
        return None
    if before.strategy() is not None:
        return "reserve"
    return "unsatisfied" if before.rejected else None


def _mode(before: Entry | None, after: Entry, repeat: bool) -> str:
    had = None if before is None else before.strategy()
    if had is None:
        return "unsatisfied" if after.winner is None else "add"
    if not repeat or after.strategy() == had:
        return "reserve"
    return "update"


def _unreadable(path: Path, error: OSError) -> TuneBankError:
    why = getattr(error, "reason", "") or error.strerror or str(error)
    return TuneBankError(f"the tuning bank file {path} cannot be read ({why}): move it away and tune again")


def _damaged(path: Path, problem: str, allowed: str) -> TuneBankError:
    return TuneBankError(f"the tuning bank file {path} is damaged: {problem}; allowed: {allowed}. Move it away and "
                         "tune again (perfsight never overwrites it)")


def _differences(recorded: dict, running: dict) -> list[str]:
    return [f"{name}: bank {recorded.get(name, 'absent')}, running {running.get(name, 'absent')}"
            for name in sorted(set(recorded) | set(running)) if recorded.get(name) != running.get(name)]


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"bank kind {kind!r} is not one of {', '.join(KINDS)}")


def _canonical(value) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"a bank signature must be plain JSON (str, number, bool, None, list, dict): {error}")

