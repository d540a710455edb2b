"""`hami tune`: the tuning guide's recommendations from the cluster's pods and the monitor's metrics.

    hami tune [--kubeconfig FILE] --metrics-url http://NODE:9394/metrics [--metrics-url ...]
              [--samples 6 --interval 10]        # scrape each monitor N times; peaks over the window
    hami tune --prometheus-url http://prometheus:9090 [--window 7d]   # max_over_time over the window
    hami tune ... [--device-memory-scaling 1.0] [--device-split-count 10] [--json]
    hami tune ... --whatif-scenario tune.yaml      # then: hami whatif --scenario tune.yaml

Prints: the safe memory over-commit ratio (sum requested / sum peak used x 0.9), a deviceSplitCount
from the memory-request distribution, pods that never use their cores, and nodes with pending
pods, each with the numbers behind it (`hami.doctor.recommend`). Exit code 0; 2 when metrics cannot
be read.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import aiohttp
import orjson

from hami.config import default_vendor_table
from hami.doctor import gather
from hami.doctor.recommend import (
    METRICS,
    MetricSample,
    Recommendations,
    TuneError,
    merge_peaks,
    parse_metrics,
    pod_info,
    recommend,
    render,
    vendor_pod,
    whatif_scenario,
)


def configure(parser: argparse.ArgumentParser) -> None:
    """The options are the flag table's (hami.config.flagtable, command "tune")."""
    from hami.cli.flags import add_command_flags

    add_command_flags(parser, "tune")


async def scrape(session: aiohttp.ClientSession, url: str) -> list[MetricSample]:
    async with session.get(url) as resp:
        if resp.status != 200:
            raise TuneError(f"{url}: HTTP {resp.status}")
        return parse_metrics(await resp.text(), url)


async def scrape_all(urls: list[str], samples: int, interval: float) -> list[list[MetricSample]]:
    out = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for i in range(max(1, samples)):
            if i:
                await asyncio.sleep(interval)
            out.extend(await asyncio.gather(*(scrape(session, u) for u in urls)))
    return out


async def query_prometheus(base: str, window: str) -> list[MetricSample]:
    out = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for name in METRICS:
            url = base.rstrip("/") + "/api/v1/query"
            async with session.get(url, params={"query": f"max_over_time({name}[{window}])"}) as resp:
                try:
                    doc = await resp.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError) as exc:
                    raise TuneError(f"{url}: not a Prometheus API answer: {exc}") from None
            if resp.status != 200 or doc.get("status") != "success":
                raise TuneError(f"{url}: {resp.status} {doc.get('error', '')}")
            for r in (doc.get("data") or {}).get("result") or []:
                try:
                    out.append(MetricSample(name, dict(r.get("metric") or {}), float(r["value"][1])))
                except (KeyError, IndexError, TypeError, ValueError) as exc:
                    raise TuneError(f"{url}: bad sample {r!r}: {exc}") from None
    return out


async def compute(client, args: argparse.Namespace) -> Recommendations:
    items = (await client.list_pods()).get("items") or []
    pods = [p for p in map(pod_info, items) if p is not None]
    table = default_vendor_table()
    vpods = [v for v in (vendor_pod(p, table) for p in items) if v is not None]
    nodes = len((await client.list_nodes()).get("items") or [])
    if args.prometheus_url:
        scrapes = [await query_prometheus(args.prometheus_url, args.window)]
    elif args.metrics_url:
        scrapes = await scrape_all(args.metrics_url, args.samples, args.interval)
    else:
        scrapes = []
    return recommend(pods, merge_peaks(scrapes), nodes, args.device_memory_scaling, args.device_split_count, vpods)


async def main(args: argparse.Namespace) -> int:
    client = await gather.client_from_args(args)
    try:
        rec = await compute(client, args)
    except (TuneError, aiohttp.ClientError, OSError) as exc:
        print(f"hami tune: {exc}", file=sys.stderr)
        return 2
    finally:
        await client.close()
    sys.stdout.write(orjson.dumps(rec.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n" if args.json
                     else render(rec))
    if args.whatif_scenario:
        write_scenario(args.whatif_scenario, whatif_scenario(rec, args.device_memory_scaling, args.device_split_count))
        print(f"hami tune: wrote {args.whatif_scenario}; try it: hami whatif --scenario {args.whatif_scenario}",
              file=sys.stderr)
    return 0


def write_scenario(path: str, doc: dict) -> None:
    import yaml

    with open(path, "w", encoding="utf-8") as f:
        f.write("# hami tune's recommendation: hami whatif --snapshot SNAPSHOT --scenario " + path + "\n")
        yaml.safe_dump(doc, f, sort_keys=False)
