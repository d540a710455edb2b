"""`hami whatif`: the subcommand module the CLI loads (`configure` + `main`).

    hami whatif --snapshot FILE [--scenario PLAN.yaml] [--format text|json] [--html REPORT.html] [--suggest]
                [--scale-up]
                [--timing [--timing-limit S] [--timing-creators N] [--allocate-delay S]]
    hami whatif --kubeconfig K  [...]              snapshot the live cluster (reads only), then replay
    hami whatif snapshot -o FILE [--kubeconfig K]  save a snapshot for later

FILE is a saved snapshot or `kubectl get nodes,pods,resourcequotas -A -o json`. Without
--scenario only the baseline runs (the snapshot's pending pods, queued again). --timing also runs
each scenario through an embedded API server, the real scheduler over HTTP and a kube-scheduler
1.31 loop, and reports how long the batch takes to bind (pods/s, queue waits). --scale-up answers how
many nodes of which node group would place the pending pods, as Cluster Autoscaler counts them (in-tree
filters only) and as HAMi's scheduler would (docs/autoscaling.md). Exit codes: 0;
2 for unreadable input (the message names the file, the path in it and the field).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys

import orjson
import structlog

from hami.config import KubeSettings

from .cluster import SnapshotError, parse_snapshot
from .engine import SchedulerDefaults, run_plan
from .report import render_text, to_json
from .scenario import Plan, Scenario, ScenarioError, parse_plan_text


def configure(parser: argparse.ArgumentParser) -> None:
    """The argument and options are the flag table's (hami.config.flagtable, command "whatif")."""
    from hami.cli.flags import add_command_flags

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = __doc__
    add_command_flags(parser, "whatif")


def _kube_settings(args: argparse.Namespace) -> KubeSettings:
    return KubeSettings(
        kubeconfig=getattr(args, "kubeconfig", None),
        qps=getattr(args, "kube_qps", 50.0),
        burst=getattr(args, "kube_burst", 100),
        timeout=getattr(args, "kube_timeout", 0.0),  # parsed as a Go duration by the flag table
    )


def read_plan(path: str) -> Plan:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ScenarioError(path, "(file)", exc.strerror or str(exc)) from None
    return parse_plan_text(text, path)


@contextlib.contextmanager
def quiet_logs(verbosity: int):
    """The timing runs' embedded API server and scheduler log as roles do; below -v=2 only their
    warnings and errors reach the terminal, so the report is not mixed with their start/stop lines."""
    if verbosity >= 2:
        yield
        return
    before = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        yield
    finally:
        structlog.configure(wrapper_class=before)


def _err(message: str) -> int:
    print(f"hami whatif: error: {message}", file=sys.stderr)
    return 2


async def main(args: argparse.Namespace) -> int:
    from hami.kube.client import ApiError, KubeConfigError

    from . import snapshot

    try:
        if args.command == "snapshot":
            if not args.output:
                return _err("snapshot needs -o FILE")
            doc = await snapshot.take(_kube_settings(args))
            snapshot.save(doc, args.output)
            print(f"saved {len(doc['items'])} objects to {args.output}", file=sys.stderr)
            return 0
        if args.snapshot_file:
            cluster = snapshot.load(args.snapshot_file)
        else:
            cluster = parse_snapshot(await snapshot.take(_kube_settings(args)), "live cluster")
        plan = read_plan(args.scenario) if args.scenario else Plan(scenarios=(Scenario("baseline"),))
    except (SnapshotError, ScenarioError) as exc:
        return _err(str(exc))
    except (ApiError, KubeConfigError, OSError) as exc:
        return _err(f"cannot read the cluster: {exc}")
    defaults = SchedulerDefaults(node_policy=args.node_scheduler_policy, gpu_policy=args.gpu_scheduler_policy,
                                 scheduler_name=args.scheduler_name)
    for w in cluster.warnings:
        print(f"hami whatif: warning: {w}", file=sys.stderr)
    results = run_plan(cluster, plan, defaults)
    suggestions = None
    if args.suggest:
        from .suggest import suggest

        suggestions = suggest(cluster, plan, defaults, baseline=results[0])
    scale = None
    if args.scale_up:
        from .scaleup import scale_up

        scale = scale_up(cluster, defaults)
    timings = None
    if args.timing:
        if args.timing_limit <= 0 or args.allocate_delay < 0 or args.timing_creators < 1:
            return _err("--timing-limit must be > 0, --allocate-delay >= 0 and --timing-creators >= 1")
        timings = await _timed_runs(args, cluster, plan, defaults, results, suggestions)
    if args.html:
        from .html import write_report

        try:
            write_report(args.html, results, cluster.warnings, suggestions)
        except OSError as exc:
            return _err(f"--html {args.html}: {exc.strerror or exc}")
    _print_results(args, results, cluster.warnings, suggestions, timings, scale)
    return 0


async def _timed_runs(args: argparse.Namespace, cluster, plan, defaults, results, suggestions) -> list:
    """--timing: each scenario (and the best suggestion, when it places more) replayed against the clock."""
    from .timing import run_timed

    timed = list(zip(plan.scenarios, results, strict=True))
    if suggestions and suggestions[0].gained > 0:
        # The best suggestion is timed too: how long its extra pods take to bind, not only that they fit.
        best = suggestions[0]
        timed.append((Scenario(f"suggested: {best.label}", best.changes, plan.scenarios[0].workloads),
                      best.result))
    timings = []
    with quiet_logs(getattr(args, "v", 0) or 0):
        for scenario, result in timed:
            print(f"hami whatif: timing scenario {scenario.name} ...", file=sys.stderr)
            timings.append(await run_timed(cluster, scenario, plan, defaults, result, limit=args.timing_limit,
                                           allocate_delay=args.allocate_delay, creators=args.timing_creators))
    return timings


def _print_results(args: argparse.Namespace, results, warnings, suggestions, timings, scale) -> None:
    """The report on stdout: JSON, or text sections for the results, suggestions, timings and scale-up."""
    if args.format == "json":
        doc = to_json(results, warnings,
                      [s.as_dict() for s in suggestions] if suggestions is not None else None)
        if timings is not None:
            doc["timing"] = [t.as_dict() for t in timings]
        if scale is not None:
            doc["scaleUp"] = scale.as_dict()
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_text(results))
        if suggestions is not None:
            from .suggest import render_suggestions

            sys.stdout.write(render_suggestions(suggestions))
        if timings is not None:
            from .timing import render_timing

            sys.stdout.write(render_timing(timings))
        if scale is not None:
            from .scaleup import render_scale_up

            sys.stdout.write(render_scale_up(scale))
