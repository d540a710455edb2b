"""Every flag is documented: docs/flags.md is what scripts/gen-flags-doc makes from the flag table (so a
new flag, alias or refused HAMi flag lands in it), it names every spelling of each, and README.md
points to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hami.config.flagtable import ALIAS_FLAGS, REFUSED_FLAGS, ROLE_FLAGS

ROOT = Path(__file__).resolve().parents[2]


def test_docs_flags_md_is_generated_from_the_flag_table():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-flags-doc"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_every_flag_alias_and_refused_flag_is_named_in_the_docs():
    text = (ROOT / "docs" / "flags.md").read_text()
    for flag in (*ROLE_FLAGS, *ALIAS_FLAGS, *REFUSED_FLAGS):
        assert f"`{flag.spellings[0]}`" in text, flag.spellings[0]
    refused = text.split("## HAMi flags hami refuses", 1)[1]
    assert all(f"`{f.spellings[0]}`" in refused for f in REFUSED_FLAGS) and len(REFUSED_FLAGS) >= 3
    assert "docs/flags.md" in (ROOT / "README.md").read_text()
