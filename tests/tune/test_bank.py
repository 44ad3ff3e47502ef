"""The tuning bank: canonical keys, round trip, the seed's update modes and repo_summary counters,
staleness, locking with concurrent writers, rank 0 as the only writer, the read-only built-in rules, and
damaged files refused naming the file and the key: values nested too deeply, FIFOs never waited on."""
import json
import multiprocessing
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import perfsight
from perfsight.core.errors import TuneBankError
from perfsight.tune.bank import Bank, Entry, RepoSummary, builtin_rules
from perfsight.tune.env import TuneSettings

FP = "cpu-test"


def conv_signature(channels=8, **extra):
    return {"op": "aten::convolution", "shapes": [[1, channels, 14, 14], [channels, 1, 3, 3]],
            "dtypes": ["float32", "float32"], "strides": [[1568, 196, 14, 1]], "layout": "contiguous",
            "attributes": {"groups": channels, "padding": [1, 1]}, "train": True, **extra}


def entry(bank, signature, winner="channels_last", kind="op", params=None):
    candidates = [{"name": "default", "params": {}, "median_us": 20.0, "spread_us": 1.0, "samples": 9,
                   "ok": True, "reason": ""},
                  {"name": "channels_last", "params": params or {"memory_format": "channels_last"},
                   "median_us": 10.0, "spread_us": 0.5, "samples": 9, "ok": True, "reason": ""}]
    return Entry(key=bank.key(kind, signature), kind=kind, signature=signature, candidates=candidates,
                 winner=winner, default_us=20.0, winner_us=10.0 if winner else None)


@pytest.fixture
def bank(tmp_path, monkeypatch):
    for name in ("RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    return Bank(tmp_path, FP)


def test_keys_are_canonical(bank):
    signature = conv_signature()
    shuffled = dict(reversed(list(signature.items())))
    shuffled["attributes"] = {"padding": [1, 1], "groups": 8}
    key = bank.key("op", signature)
    assert key == bank.key("op", shuffled) == Bank(bank.directory.parent, "other").key("op", signature)
    assert key.isdigit()  # a decimal 64-bit key, like the seed's repo_key
    assert key != bank.key("op", conv_signature(channels=16))
    assert key != bank.key("op", conv_signature(train=False))
    assert key != bank.key("subgraph", signature)
    with pytest.raises(ValueError, match="plain JSON"):
        bank.key("op", {"dtype": object()})
    with pytest.raises(ValueError, match="bank kind 'kernel'"):
        bank.key("kernel", signature)


def test_put_get_round_trip(bank):
    made = entry(bank, conv_signature())
    assert bank.get("op", made.key) is None
    assert bank.put(made, repeat=False) == "add"
    got = bank.get("op", made.key)
    assert got == made  # put filled in versions, created and updated
    assert got.signature == conv_signature() and got.winner == "channels_last"
    assert got.versions == bank.running_versions() and got.created == got.updated != ""
    assert bank.get("subgraph", made.key) is None  # separate stores
    assert sorted(p.name for p in bank.directory.iterdir()) == [".lock", "bank.json", "opat.json"]
    assert json.loads((bank.directory / "bank.json").read_text())["versions"] == bank.running_versions()


def test_update_modes_and_repo_summary(bank):
    """A deterministic scenario touching every mode, REPEAT_TUNE off then on."""
    summary = RepoSummary()
    a, b, c, d = (conv_signature(channels=n) for n in (8, 16, 32, 64))
    summary.record(bank.put(entry(bank, a), repeat=False))                     # add
    summary.record(bank.put(entry(bank, b), repeat=False))                     # add
    summary.record(bank.put(entry(bank, c, winner=None), repeat=False))        # unsatisfied: default won
    assert bank.get("op", bank.key("op", c)).winner is None                   # kept as a record of the try
    assert summary.as_dict() == {"repo_add_num": 2, "repo_hit_num": 0, "repo_reserved_num": 0,
                                 "repo_unsatisfied_num": 1, "repo_update_num": 0, "total_num": 3}

    # REPEAT_TUNE off: strategies already in the bank are kept unchanged (hit + reserved), nothing written
    before = (bank.directory / "opat.json").read_bytes()
    assert bank.put(entry(bank, a, params={"memory_format": "other"}), repeat=False) == "reserve"
    assert bank.put(entry(bank, c, winner=None), repeat=False) == "unsatisfied"
    assert (bank.directory / "opat.json").read_bytes() == before

    # REPEAT_TUNE on: same winner -> reserve; another winner -> update; a tried op now won -> add
    summary = RepoSummary()
    summary.record(bank.put(entry(bank, a), repeat=True))                                          # reserve
    summary.record(bank.put(entry(bank, b, params={"memory_format": "channels_last", "onednn": True}),
                            repeat=True))                                                          # update
    summary.record(bank.put(entry(bank, c), repeat=True))                                          # add
    summary.record(bank.put(entry(bank, d, winner=None), repeat=True))                             # unsatisfied
    assert summary.as_dict() == {"repo_add_num": 1, "repo_hit_num": 2, "repo_reserved_num": 1,
                                 "repo_unsatisfied_num": 1, "repo_update_num": 1, "total_num": 4}
    updated = bank.get("op", bank.key("op", b))
    assert updated.candidates[1]["params"]["onednn"] is True and updated.updated >= updated.created
    assert len(bank.entries("op")) == 4


def test_seed_opat_summary_is_consistent():
    """The seed's OPAT example: add 2, hit 10, reserved 10, unsatisfied 1, update 0, total 13."""
    summary = RepoSummary()
    for mode in ["add"] * 2 + ["reserve"] * 10 + ["unsatisfied"]:
        summary.record(mode)
    assert summary.as_dict() == {"repo_add_num": 2, "repo_hit_num": 10, "repo_reserved_num": 10,
                                 "repo_unsatisfied_num": 1, "repo_update_num": 0, "total_num": 13}
    with pytest.raises(ValueError, match="'hit' is not one of"):
        summary.record("hit")


def test_stale_bank_is_reported_and_refused(bank, tmp_path, monkeypatch):
    bank.put(entry(bank, conv_signature()), repeat=False)
    assert bank.stale() == []
    bank.check_fresh()
    meta = json.loads((bank.directory / "bank.json").read_text())
    meta["versions"]["torch"] = "2.0.0"
    meta["versions"]["onednn"] = "2.7.3"
    (bank.directory / "bank.json").write_text(json.dumps(meta))
    running = bank.running_versions()
    assert bank.stale() == [f"onednn: bank 2.7.3, running {running['onednn']}",
                            f"torch: bank 2.0.0, running {running['torch']}"]
    with pytest.raises(TuneBankError, match=r"tuned under other library versions \(onednn: bank 2.7.3"):
        bank.check_fresh()
    with pytest.raises(TuneBankError, match="re-tune into another TUNE_BANK_PATH"):
        bank.put(entry(bank, conv_signature(channels=3)), repeat=False)
    monkeypatch.setattr("perfsight.tune.bank.device_fingerprint", lambda facts=None: FP)
    opened = Bank.open(TuneSettings.from_env({"TUNE_BANK_PATH": str(tmp_path)}))
    assert opened.directory == bank.directory
    with pytest.raises(TuneBankError, match=r"tuned under other library versions"):
        opened.check_fresh()                                    # refused, never silently used


def _add_fifty(root, first):
    writer = Bank(root, FP)
    for n in range(first, first + 50):
        assert writer.put(entry(writer, conv_signature(channels=n)), repeat=False) == "add"


def test_two_concurrent_writers(bank):
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_add_fifty, args=(bank.directory.parent, first)) for first in (1, 1001)]
    for writer in writers:
        writer.start()
    store = bank.directory / "opat.json"
    while any(writer.is_alive() for writer in writers):   # however many reads the scheduler allows: none torn
        if store.exists():
            json.loads(store.read_text())
    for writer in writers:
        writer.join()
        assert writer.exitcode == 0
    assert len(bank.entries("op")) == 100                  # neither writer lost the other's entries
    assert {e.signature["attributes"]["groups"] for e in bank.entries("op").values()} == \
        set(range(1, 51)) | set(range(1001, 1051))


def test_only_rank_zero_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    follower = Bank(tmp_path, FP)
    made = entry(follower, conv_signature())
    assert follower.put(made, repeat=False) == "add"  # the mode rank 0 reports, but nothing written
    assert not (tmp_path / FP).exists()
    monkeypatch.setenv("RANK", "0")
    Bank(tmp_path, FP).put(made, repeat=False)
    monkeypatch.setenv("RANK", "1")
    assert follower.get("op", made.key).winner == "channels_last"  # other ranks read
    assert follower.put(made, repeat=False) == "reserve"


def test_read_only_bank_and_builtin_rules(tmp_path):
    shipped = Bank(tmp_path, FP, read_only=True)
    with pytest.raises(TuneBankError, match="is read-only"):
        shipped.put(entry(shipped, conv_signature()), repeat=False)
    rules = builtin_rules()
    by_name = {rule.name: rule for rule in rules}
    assert (by_name["depthwise conv: channels_last + oneDNN"].speedup_min,
            by_name["conv: channels_last + oneDNN"].speedup_max) == (2.0, 1.25)
    assert all(1 < rule.speedup_min <= rule.speedup_max for rule in rules)
    with pytest.raises(AttributeError):
        rules[0].speedup_max = 9.0


def test_builtin_bank_is_package_data():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "pyproject.toml")) as pyproject:
        assert '"tune/builtin_bank.json"' in pyproject.read()


def stored(bank, file="opat.json") -> dict:
    return json.loads((bank.directory / file).read_text())


def test_a_bank_without_bank_json_is_refused(bank):
    """bank.json records the library versions the bank was tuned under: without it, entries tuned under
    another torch could not be told apart, so the bank is refused, not taken as fresh."""
    made = entry(bank, conv_signature())
    bank.put(made, repeat=False)
    (bank.directory / "bank.json").unlink()
    message = (f"the tuning bank {bank.directory} has opat.json but no bank.json, which records the library "
               "versions it was tuned under")
    with pytest.raises(TuneBankError, match=re.escape(message)):
        bank.stale()
    with pytest.raises(TuneBankError, match=re.escape(message)):
        bank.check_fresh()
    assert not (bank.directory / "bank.json").exists()  # nothing written on the way


def test_entries_tuned_under_other_versions_are_stale_even_beside_a_fresh_bank_json(bank):
    bank.put(entry(bank, conv_signature()), repeat=False)
    bank.put(entry(bank, conv_signature(channels=16)), repeat=False)
    store = stored(bank)
    for value in store["entries"].values():
        value["versions"]["torch"] = "2.0.0"
    (bank.directory / "opat.json").write_text(json.dumps(store))
    assert bank.stale() == [f"2 entries of opat.json: torch: bank 2.0.0, running {bank.running_versions()['torch']}"]
    with pytest.raises(TuneBankError, match="tuned under other library versions"):
        bank.check_fresh()


def _winner_not_a_candidate(store):
    next(iter(store["entries"].values()))["winner"] = "channels_first"


def _entry_without_signature(store):
    next(iter(store["entries"].values())).pop("signature")


def _time_as_text(store):
    next(iter(store["entries"].values()))["default_us"] = "fast"


def _key_mismatch(store):
    key, value = next(iter(store["entries"].items()))
    store["entries"]["42"] = store["entries"].pop(key)


@pytest.mark.parametrize("file, damage, message", [
    ("bank.json", "[]", "Expected `object`, got `array`"),
    ("bank.json", "not json", "JSON is malformed: invalid character (byte 4)"),
    ("bank.json", '{"fingerprint": "cpu-test", "versions": {"torch": 2}}', "Expected `str`, got `int` - at "
                                                                          "`$.versions[...]`"),
    ("opat.json", "[]", "Expected `object`, got `array`"),
    ("opat.json", '{"kind": "subgraph", "entries": {}}', "kind 'subgraph' in opat.json, which holds kind 'op'"),
    ("opat.json", '{"kind": "op", "entries": []}', "Expected `object`, got `array` - at `$.entries`"),
    ("opat.json", _entry_without_signature, "Object missing required field `signature`"),
    ("opat.json", _time_as_text, "Expected `float | null`, got `str` - at `$.default_us`"),
    ("opat.json", _winner_not_a_candidate, "its winner 'channels_first' is not one of its candidates "
                                           "(default, channels_last)"),
    ("opat.json", _key_mismatch, "entry '42': it holds key '"),
    ("opat.json", "directory", "cannot be read (a folder, not a regular file; perfsight reads only regular files)"),
])
def test_a_damaged_bank_file_is_refused_naming_the_file_and_what_is_wrong(bank, file, damage, message):
    made = entry(bank, conv_signature())
    bank.put(made, repeat=False)
    path = bank.directory / file
    if damage == "directory":
        path.unlink()
        path.mkdir()
    elif callable(damage):
        store = stored(bank, file)
        damage(store)
        path.write_text(json.dumps(store))
    else:
        path.write_text(damage)
    damaged = None if damage == "directory" else path.read_bytes()
    with pytest.raises(TuneBankError) as refused:
        bank.check_fresh()
    text = str(refused.value)
    assert text.startswith(f"the tuning bank file {path} ") and message in text, text
    assert "move it away" in text.lower()
    with pytest.raises(TuneBankError, match=re.escape(str(path))):
        bank.put(entry(bank, conv_signature(channels=3)), repeat=False)
    assert damaged is None or path.read_bytes() == damaged  # nothing written over it


@pytest.mark.parametrize(("file", "depth", "where"), [
    ("opat.json", 1004, '`$.entries["{key}"].signature.shapes...`'),
    ("bank.json", 1002, "`$.device.cpu[...][...]...`"),
])
def test_a_bank_value_nested_too_deeply_is_refused_naming_the_file_and_the_key(bank, file, depth, where):
    made = entry(bank, conv_signature())
    bank.put(made, repeat=False)
    path = bank.directory / file
    document = stored(bank, file)
    if file == "opat.json":
        document["entries"][made.key]["signature"]["shapes"] = "DEEP"
    else:
        document["device"] = {"cpu": "DEEP"}
    path.write_text(json.dumps(document).replace('"DEEP"', "[" * 1000 + "]" * 1000))
    damaged = path.read_bytes()
    with pytest.raises(TuneBankError) as refused:
        bank.check_fresh()
    assert str(refused.value).startswith(
        f"the tuning bank file {path} is damaged: JSON nested {depth} levels deep "
        f"(arrays and objects within each other) at {where.format(key=made.key)}; perfsight reads at most 64; "
        "allowed: ")
    assert path.read_bytes() == damaged                          # nothing written over it


FIFO_CHECK = """
import sys
from pathlib import Path
from perfsight.core.errors import TuneBankError
from perfsight.tune.bank import Bank
bank = Bank(Path(sys.argv[1]), sys.argv[2])
try:
    bank.check_fresh() if sys.argv[3] == "read" else bank.put(bank.entries("op")[sys.argv[4]], repeat=True)
except TuneBankError as error:
    print(error)
"""


@pytest.mark.parametrize(("file", "use"), [("bank.json", "read"), ("opat.json", "read"), (".lock", "write")])
def test_a_fifo_in_the_bank_is_refused_not_waited_on(bank, file, use):
    made = entry(bank, conv_signature())
    bank.put(made, repeat=False)
    path = bank.directory / file
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    checked = subprocess.run([sys.executable, "-c", FIFO_CHECK, str(bank.directory.parent), FP, use, made.key],
                             capture_output=True, text=True, timeout=60,   # a hang fails, never waits
                             env={**os.environ, "PYTHONPATH": str(Path(perfsight.__file__).parents[1])})
    assert checked.stdout.strip() == (f"the tuning bank file {path} cannot be read (a FIFO (named pipe), not a "
                                      "regular file; perfsight reads only regular files): move it away and tune "
                                      "again"), checked.stderr
