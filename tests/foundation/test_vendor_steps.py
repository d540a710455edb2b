"""Vendor behaviour read in one place (hami.vendorsteps): every hook of the vendor table has the steps its
traits need, each step's own table names only hooks the view shows, every term a shipped row adds to the node
score has its function, docs/vendors.md's table is the view's, and nothing in hami imports the view."""

from __future__ import annotations

import configparser
from pathlib import Path

from hami.config.vendortable import default_vendor_table
from hami.device.vendorhooks import HOOKS
from hami.scheduler.placement.vendorscore import TERMS
from hami.vendorsteps import OWN_TABLES, SHARED, STEPS, render_table, score_kinds, vendor_steps

ROOT = Path(__file__).resolve().parents[2]

# trait -> the steps a hook with it must do its own way (the shared step cannot do what the trait says)
NEEDS = {
    "vnpu_chips": ("request", "allocation", "webhook"),  # templates, vNPU modes, runtime info
    "sgpu": ("request", "fit", "allocation", "webhook", "doctor"),  # QoS, app classes, MetaLink
    "counted_by_cards": ("request", "fit"),  # cards counted by the count resource itself
    "admits_memory_or_cores": ("webhook",),  # a pod naming only memory or cores is the vendor's
    "asks_by_memory_or_cores": ("request",),
    "split_request_per_card": ("allocation", "webhook"),  # a container's total split over its cards
}


def test_every_hook_has_every_step_it_needs():
    steps = vendor_steps()
    assert set(steps) == {name for name, hook in HOOKS.items() if not hook.nvidia}
    missing = [f"{name}: {trait} needs its own {step}" for name, hook in HOOKS.items() if not hook.nvidia
               for trait, needed in NEEDS.items() if getattr(hook, trait) for step in needed
               if steps[name][step] is None]
    assert not missing, missing
    for name, row in steps.items():
        assert tuple(row) == STEPS
        assert set(row["score"]) == set(score_kinds(HOOKS[name])) <= set(TERMS), name


def test_every_own_step_belongs_to_a_vendor_hook_of_the_view():
    for step, table in OWN_TABLES.items():
        assert set(table) <= set(vendor_steps()), (step, set(table) - set(vendor_steps()))
        assert all(fn is not None for fn in table.values()), step


def test_every_shipped_rows_score_term_is_its_hooks_or_a_shared_one():
    for row in default_vendor_table().vendors:
        if not row.node_score or HOOKS[row.hook].nvidia:
            continue
        own = vendor_steps()[row.hook]["score"]
        assert row.node_score in own or row.node_score in SHARED["score"], (row.name, row.node_score)
        assert row.node_score in TERMS


def test_docs_vendors_md_has_the_views_table():
    text = (ROOT / "docs" / "vendors.md").read_text(encoding="utf-8")
    assert render_table() in text, "docs/vendors.md's hook and step table is out of date: paste " \
                                   "`python -c 'from hami.vendorsteps import render_table; print(render_table())'`"


def test_nothing_in_hami_imports_the_view():
    """The contract names every other top-level module of hami, so a new one cannot reach the view unseen."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    section = cfg["importlinter:contract:vendorsteps-view"]
    sources = set(section["source_modules"].split())
    tops = {f"hami.{p.stem if p.is_file() else p.name}" for p in (ROOT / "hami").iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert tops - {"hami.vendorsteps", "hami.__main__"} == sources
    assert section["forbidden_modules"].split() == ["hami.vendorsteps"]
