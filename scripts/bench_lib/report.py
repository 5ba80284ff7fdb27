"""Aggregation (median / min / max over repeats), ratios, targets and the markdown report."""

import statistics

BASELINES = ("direct", "socat")

# Targets of issue 5 for cf-access-tcp. KB/MB are decimal (the strict reading): 20 KB = 19.53 KiB.
TARGET_UPLOAD_MIBPS = 2 * 204
TARGET_DOWNLOAD_MIBPS = 2 * 275
TARGET_CPU_PER_GIB = 0.5
TARGET_RTT_P50_OVER_DIRECT_US = 50
TARGET_RTT_P99_US = 300
TARGET_SETUP_P50_MS = 0.75
TARGET_RSS_PER_CONN_KIB = 20_000 / 1024
TARGET_RSS_IDLE_KIB = 8_000_000 / 1024
TARGET_CONCURRENT = 5000


def _metrics(args):
    """(key, label, section, source, field, modes-filter, digits). source = results key."""
    relay = lambda m: m != "direct"          # noqa: E731 - a process of its own to measure
    tunnel = lambda m: m in ("ours", "other")  # noqa: E731 - goes through the edge emulator
    every = lambda m: True                   # noqa: E731
    ours = lambda m: m == "ours"             # noqa: E731 - known to be one process
    mib = args.bulk_mib
    size = "%d MiB" % mib if mib % 1024 else "%d GiB" % (mib // 1024)
    rows = [
        ("upload_mib_s", "Upload %s, MiB/s" % size, "bulk", "upload", "mib_per_s", every, 0),
        ("upload_cpu_client", "Upload CPU s/GiB, client/relay", "bulk", "upload", "cpu_client_s_per_gib", relay, 2),
        ("upload_cpu_edge", "Upload CPU s/GiB, edge emulator", "bulk", "upload", "cpu_edge_s_per_gib", tunnel, 2),
        ("upload_frame", "Upload avg WebSocket frame, bytes", "bulk", "upload", "avg_frame_bytes", tunnel, 0),
        ("download_mib_s", "Download %s, MiB/s" % size, "bulk", "download", "mib_per_s", every, 0),
        ("download_cpu_client", "Download CPU s/GiB, client/relay", "bulk", "download", "cpu_client_s_per_gib", relay, 2),
        ("download_cpu_edge", "Download CPU s/GiB, edge emulator", "bulk", "download", "cpu_edge_s_per_gib", tunnel, 2),
        ("download_frame", "Download avg WebSocket frame, bytes", "bulk", "download", "avg_frame_bytes", tunnel, 0),
        ("rtt_p50", "64 B round trip p50, us", "latency", "latency", "p50_us", every, 0),
        ("rtt_p99", "64 B round trip p99, us", "latency", "latency", "p99_us", every, 0),
        ("rtt_p999", "64 B round trip p99.9, us", "latency", "latency", "p999_us", every, 0),
        ("setup_p50", "New connection p50, ms", "setup", "setup", "p50_ms", every, 2),
        ("setup_p99", "New connection p99, ms", "setup", "setup", "p99_ms", every, 2),
    ]
    for n in args.conc_sizes:
        src = "concurrency_%d" % n
        rows += [
            ("c%d_worked" % n, "%d concurrent: worked" % n, "concurrency", src, "worked", every, 0),
            ("c%d_after_idle" % n, "%d concurrent: worked after %g s idle" % (n, args.idle), "concurrency", src,
             "worked_after_idle", every, 0),
            ("c%d_rss_idle" % n, "%d concurrent: RSS idle (fresh process), kB" % n, "concurrency", src,
             "rss_idle_kb", relay, 0),
            ("c%d_rss_idle_anon" % n, "%d concurrent: RSS idle, anonymous part (heap, stacks), kB" % n,
             "concurrency", src, "rss_idle_anon_kb", ours, 0),
            ("c%d_rss_per_conn" % n, "%d concurrent: RSS per connection, kB" % n, "concurrency", src,
             "rss_per_conn_kb", relay, 1),
            ("c%d_fds_per_conn" % n, "%d concurrent: fds per connection" % n, "concurrency", src,
             "fds_per_conn", relay, 2),
        ]
    return rows


def summarize(results, args):
    summary = {}
    for mode in args.modes:
        per = summary[mode] = {}
        for key, _, section, src, field, applies, _ in _metrics(args):
            if section not in args.sections or not applies(mode):
                continue
            values = [e[field] for e in results.get(mode, {}).get(src, [])
                      if e.get(field) is not None and (e.get("ok", True) or field.startswith("worked"))]
            per[key] = None if not values else {
                "median": statistics.median(values), "min": min(values), "max": max(values),
                "n": len(values), "values": values,
            }
        per["rss_start_kb"] = results.get(mode, {}).get("rss_start_kb")
        integ = results.get(mode, {}).get("integrity")
        per["integrity"] = None if integ is None else {"ok": integ["ok"], "error": integ["error"],
                                                       "mib_per_s": integ.get("mib_per_s")}
    return summary


def missing_numbers(summary, args):
    out = []
    for mode in args.modes:
        for key, label, section, _, _, applies, _ in _metrics(args):
            if section in args.sections and applies(mode) and summary[mode].get(key) is None:
                out.append("%s: %s" % (mode, label))
    return out


def _median(summary, mode, key):
    v = summary.get(mode, {}).get(key)
    return None if v is None else v["median"]


def ratios(summary, args):
    out = {}
    for mode in ("ours", "other"):
        if mode not in args.modes:
            continue
        for base in BASELINES:
            if base not in args.modes:
                continue
            r = out.setdefault("%s/%s" % (mode, base), {})
            for key, *_ in _metrics(args):
                a, b = _median(summary, mode, key), _median(summary, base, key)
                r[key] = None if a is None or b is None or b == 0 else a / b
    return out


def targets(summary, args):
    """The issue's targets for cf-access-tcp: list of {target, value, met}."""
    if "ours" not in args.modes:
        return []
    m = lambda key: _median(summary, "ours", key)  # noqa: E731
    out = []

    def add(name, value, ok, shown):
        out.append({"target": name, "value": value, "shown": shown,
                    "met": None if value is None else bool(ok)})

    for d, goal in (("upload", TARGET_UPLOAD_MIBPS), ("download", TARGET_DOWNLOAD_MIBPS)):
        v = m("%s_mib_s" % d)
        add("%s >= %d MiB/s (2x cloudflared)" % (d, goal), v, v is not None and v >= goal,
            None if v is None else "%.0f MiB/s" % v)
        v = m("%s_cpu_client" % d)
        add("%s CPU <= %.1f s/GiB" % (d, TARGET_CPU_PER_GIB), v, v is not None and v <= TARGET_CPU_PER_GIB,
            None if v is None else "%.2f s/GiB" % v)
    p50, d50 = m("rtt_p50"), _median(summary, "direct", "rtt_p50")
    if p50 is not None and d50 is not None:
        add("round trip p50 <= direct + %d us" % TARGET_RTT_P50_OVER_DIRECT_US, p50 - d50,
            p50 - d50 <= TARGET_RTT_P50_OVER_DIRECT_US, "%.0f us (direct %.0f, +%.0f)" % (p50, d50, p50 - d50))
    else:
        add("round trip p50 <= direct + %d us" % TARGET_RTT_P50_OVER_DIRECT_US, None, False, None)
    v = m("rtt_p99")
    add("round trip p99 <= %d us" % TARGET_RTT_P99_US, v, v is not None and v <= TARGET_RTT_P99_US,
        None if v is None else "{:,.0f} us".format(v))
    v = m("setup_p50")
    add("new connection p50 <= %.2f ms" % TARGET_SETUP_P50_MS, v, v is not None and v <= TARGET_SETUP_P50_MS,
        None if v is None else "%.2f ms" % v)
    if args.conc_sizes:
        n = max(args.conc_sizes)
        v = m("c%d_rss_per_conn" % n)
        add("RSS per idle connection <= 20 KB (19.5 KiB), at %d" % n, v,
            v is not None and v <= TARGET_RSS_PER_CONN_KIB, None if v is None else "%.1f KiB" % v)
        v = m("c%d_rss_idle" % n)
        add("RSS idle <= 8 MB (7,813 KiB)", v, v is not None and v <= TARGET_RSS_IDLE_KIB,
            None if v is None else "{:,.0f} KiB".format(v))
        if TARGET_CONCURRENT in args.conc_sizes:
            v = summary["ours"].get("c%d_after_idle" % TARGET_CONCURRENT)
            worst = None if v is None else v["min"]
            add("5,000 concurrent all working (after idle, every repeat)", worst,
                worst == TARGET_CONCURRENT, None if worst is None else "%d of 5000" % worst)
    return out


def _cell(entry, digits):
    if entry is None:
        return "—"
    f = "{:,.%df}" % digits
    if entry["n"] == 1 or entry["min"] == entry["max"]:
        return f.format(entry["median"])
    return "%s [%s–%s]" % (f.format(entry["median"]), f.format(entry["min"]), f.format(entry["max"]))


cell = _cell   # for the other sections' tables (sshbench)


def _ratio(v):
    if v is None:
        return "—"
    return "%.2f" % v if v < 100 else "%.0f" % v


def markdown(summary, args, bench, machine, command, elapsed):
    modes = args.modes
    lines = []
    lines.append("### cf-access-tcp benchmark%s" % (" (quick)" if args.quick else ""))
    lines.append("")
    lines.append("`%s` — %d repeat(s), median [min–max]; %s; %s cores, %s; load average %s at the "
                 "start, %s at the end; %.0f s." % (
        command.strip(), args.repeats, "rounds %d, setups %d, concurrency %s, idle %g s" % (
            args.rounds, args.setups, "/".join(str(n) for n in args.conc_sizes) or "-", args.idle),
        machine["nproc"], machine["cpu_model"], machine.get("loadavg_start"), machine.get("loadavg_end"),
        elapsed))
    if args.ours_wrapper:
        lines.append("")
        lines.append("cf-access-tcp ran under `%s`: its figures are the wrapper's." % args.ours_wrapper)
    if args.edge_wrapper:
        lines.append("")
        lines.append("The edge emulators ran under `%s`: their figures are the wrapper's." % args.edge_wrapper)
    lines.append("")
    header = ["Measure"] + [bench.label(m) for m in modes]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    rows = _metrics(args)
    for key, label, section, _, _, applies, digits in rows:
        if section not in args.sections:
            continue
        cells = [label]
        for m in modes:
            cells.append(_cell(summary[m].get(key), digits) if applies(m) else "—")
        lines.append("| " + " | ".join(cells) + " |")
    starts = [summary[m].get("rss_start_kb") for m in modes]
    if any(v is not None for v in starts):
        lines.append("| RSS at start (long-lived echo client), kB | " + " | ".join(
            "—" if v is None else "{:,}".format(v) for v in starts) + " |")
    integ = [summary[m].get("integrity") for m in modes]
    if any(v is not None for v in integ):
        lines.append("| Echo %d MiB intact (MiB/s) | " % args.integrity_mib + " | ".join(
            "—" if v is None else ("yes (%.0f)" % v["mib_per_s"] if v["ok"] else "**NO**") for v in integ) + " |")
    lines.append("")

    rat = ratios(summary, args)
    if rat:
        cols = sorted(rat.keys(), key=lambda k: (k.split("/")[0] != "ours", k))
        names = {"ours": bench.label("ours") if "ours" in modes else "ours",
                 "other": bench.label("other") if "other" in modes else "other",
                 "direct": "direct", "socat": "socat"}
        lines.append("Ratios of medians (tunnel ÷ baseline; for MiB/s higher is better, for the rest lower):")
        lines.append("")
        hdr = ["Measure"] + ["%s ÷ %s" % (names[c.split("/")[0]], names[c.split("/")[1]]) for c in cols]
        lines.append("| " + " | ".join(hdr) + " |")
        lines.append("|" + "---|" * len(hdr))
        for key, label, section, *_ in rows:
            if section not in args.sections:
                continue
            vals = [rat[c].get(key) for c in cols]
            if all(v is None for v in vals) or "_worked" in key or "_after_idle" in key:
                continue
            lines.append("| " + label + " | " + " | ".join(_ratio(v) for v in vals) + " |")
        lines.append("")

    tg = targets(summary, args)
    if tg:
        lines.append("Targets (issue 5) for cf-access-tcp:")
        lines.append("")
        lines.append("| Target | Measured (median) | Met |")
        lines.append("|---|---|---|")
        for t in tg:
            met = "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**")
            lines.append("| %s | %s | %s |" % (t["target"], t["shown"] or "—", met))
        lines.append("")
    lines.append("Notes: CPU = utime+stime from /proc/<pid>/stat before/after (socat: its process tree, "
                 "reaped forks included). Memory: VmRSS; for socat (one process per connection) the sum of "
                 "Pss over its processes. Per connection = (after %g s idle − fresh idle) ÷ connections; "
                 "fds = /proc/<pid>/fd. Upload delivery = the edge's byte counter (tunnels) or the sink "
                 "closing (direct, socat)." % args.idle)
    lines.append("")
    return "\n".join(lines)
