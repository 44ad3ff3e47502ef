"""README.md's Export section names every file the export writes, under the names it writes them (a summary's
JSON form is named only where its name is not the CSV's with .json)."""
import re
from pathlib import Path

from perfsight.views.export import catalog

README = Path(__file__).resolve().parents[3] / "README.md"


def test_every_file_name_is_documented():
    section = README.read_text(encoding="utf-8").split("## Export (msprof's shape)")[1].split("\n## ")[0]
    documented = set(re.findall(r"`([\w.{}]+\.(?:csv|json))`", section))
    for kind in catalog.ALL_FILES:
        for ext, stem in kind.stems:
            if ext != "json" or ("csv", stem) not in kind.stems:
                assert kind.name("{ts}", ext) in documented, kind.title


def test_no_two_files_share_a_name():
    """A timeline and a JSON summary exported together (one stamp) must not collide, and README.txt must
    know which kind each name is."""
    names = [(kind.name("20240102030405", ext), kind) for kind in catalog.ALL_FILES for ext, _ in kind.stems]
    assert len({name for name, _ in names}) == len(names)
    assert all(catalog.describe(name) is kind for name, kind in names)
