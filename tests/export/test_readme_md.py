"""README.md's Export section names every file the export writes, under the names it writes them (a summary's
JSON form is named only where its name is not the CSV's with .json)."""
import re
from pathlib import Path

from perfsight.export import catalog

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_file_name_is_documented():
    section = README.read_text(encoding="utf-8").split("## Export (msprof's shape)")[1].split("\n## ")[0]
    documented = set(re.findall(r"`([\w.{}]+\.(?:csv|json))`", section))
    for kind in catalog.ALL_FILES:
        for ext, stem in kind.stems:
            if ext != "json" or ("csv", stem) not in kind.stems:
                assert kind.name("{ts}", ext) in documented, kind.title
