"""scripts/bench_e2e's packing yardsticks: the lock's parallelism measured on the node watch (nodes
locked at once over the burst's steady part) agrees with Little's law (steady rate x mean hold), and
the steady rate leaves out the burst's start and drain."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    loader = importlib.machinery.SourceFileLoader("bench_e2e", str(ROOT / "scripts" / "bench_e2e"))
    spec = importlib.util.spec_from_loader("bench_e2e", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_locked_between_counts_only_the_steady_window(bench):
    # Binds at t = 0..99 s: the window is [10, 90). One node locked 0-100 (80 s inside), one 5-15
    # (5 s inside), one 95-99 (outside): 85 node-seconds over 80 s.
    times = [float(t) for t in range(100)]
    spans = [(0.0, 100.0), (5.0, 15.0), (95.0, 99.0)]
    assert bench.locked_between(spans, times) == pytest.approx(85 / 80)
    assert bench.steady_rate(times) == pytest.approx(80 / 80)


def test_too_few_binds_give_no_figure(bench):
    assert bench.locked_between([(0.0, 1.0)], [0.0, 0.5]) != bench.locked_between([(0.0, 1.0)], [0.0, 0.5])  # nan
    assert bench.steady_rate([0.0] * 20) != bench.steady_rate([0.0] * 20)  # nan: no time between binds


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 40), hold=st.floats(0.05, 1.0), gap=st.floats(0.0, 0.5),
       offsets=st.lists(st.floats(0.0, 1.0), min_size=40, max_size=40))
def test_a_steady_rotation_measures_rate_times_mean_hold(bench, nodes, hold, gap, offsets):
    """`nodes` nodes, each locked `hold` s then idle `gap` s, each bind at the lock: the measured
    parallelism is the steady rate x the hold (Little's law), within the window's edge effects."""
    period = hold + gap
    horizon = 200 * period
    spans, binds = [], []
    for n in range(nodes):
        t = offsets[n] * period
        while t < horizon:
            spans.append((t, t + hold))
            binds.append(t)
            t += period
    binds.sort()
    measured = bench.locked_between(spans, binds)
    little = bench.steady_rate(binds) * hold
    assert measured == pytest.approx(nodes * hold / period, rel=0.03)
    assert measured == pytest.approx(little, rel=0.05)
