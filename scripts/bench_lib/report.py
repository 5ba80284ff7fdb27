"""Aggregation (median / min / max over repeats), ratios, targets and the markdown report."""

import statistics

BASELINES = ("direct", "socat")

# Targets of issue 27 for cf-access-tcp, relative to socat (the no-TLS floor) and to the other
# client (cloudflared) in the same run.
TARGET_CPU_OVER_SOCAT = 0.35          # s/GiB, up and down
TARGET_RTT_OVER_SOCAT_US = 35         # p50
TARGET_RTT_OF_OTHER = 0.85            # p50
TARGET_SETUP_OF_SOCAT = 1.5           # p50
TARGET_SETUP_OF_OTHER = 0.55          # p50
TARGET_PARALLEL_OF_OTHER = 1.5        # aggregate MiB/s, up and down
TARGET_CONCURRENT = 20000
TARGET_RSS_PER_CONN_KB = 17           # decimal kB: 16.6 KiB


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
        ("setup_cpu_client", "New connection CPU ms, client/relay", "setup", "setup", "cpu_client_ms_per_conn", relay, 2),
        ("setup_cpu_edge", "New connection CPU ms, edge emulator", "setup", "setup", "cpu_edge_ms_per_conn", tunnel, 2),
    ]
    k, each = args.parallel, args.parallel_mib
    for d, word in (("upload", "uploads"), ("download", "downloads")):
        rows += [
            ("par_%s_mib_s" % d, "%d %s at once (%d MiB each), aggregate MiB/s" % (k, word, each), "parallel",
             "parallel_" + d, "mib_per_s", every, 0),
            ("par_%s_cpu" % d, "%d %s at once, CPU s/GiB, client/relay" % (k, word), "parallel",
             "parallel_" + d, "cpu_client_s_per_gib", relay, 2),
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
    """Issue 27's targets for cf-access-tcp: list of {target, value, met}. A target against a
    baseline that did not run (socat, or --client-cmd for cloudflared) is "not measured"."""
    if "ours" not in args.modes:
        return []
    ours = lambda key: _median(summary, "ours", key)        # noqa: E731
    socat = lambda key: _median(summary, "socat", key)      # noqa: E731
    other = lambda key: _median(summary, "other", key)      # noqa: E731
    name = args.client_name if "other" in args.modes else "cloudflared"
    out = []

    def add(target, value, ok, shown):
        out.append({"target": target, "value": value, "shown": shown,
                    "met": None if value is None else bool(ok)})

    for d in ("upload", "download"):
        a, b = ours("%s_cpu_client" % d), socat("%s_cpu_client" % d)
        add("%s CPU <= socat + %.2f s/GiB" % (d, TARGET_CPU_OVER_SOCAT), None if a is None or b is None else a - b,
            a is not None and b is not None and a - b <= TARGET_CPU_OVER_SOCAT,
            None if a is None or b is None else "%.2f (socat %.2f, %+.2f)" % (a, b, a - b))
    a, b, c = ours("rtt_p50"), socat("rtt_p50"), other("rtt_p50")
    add("round trip p50 <= socat + %d us" % TARGET_RTT_OVER_SOCAT_US, None if a is None or b is None else a - b,
        a is not None and b is not None and a - b <= TARGET_RTT_OVER_SOCAT_US,
        None if a is None or b is None else "%.0f us (socat %.0f, %+.0f)" % (a, b, a - b))
    add("round trip p50 <= %.2f x %s" % (TARGET_RTT_OF_OTHER, name), None if a is None or c is None else a / c,
        a is not None and c is not None and a <= TARGET_RTT_OF_OTHER * c,
        None if a is None or c is None else "%.0f us (%s %.0f, %.2fx)" % (a, name, c, a / c))
    a, b, c = ours("setup_p50"), socat("setup_p50"), other("setup_p50")
    add("new connection p50 <= %.1f x socat" % TARGET_SETUP_OF_SOCAT, None if a is None or b is None else a / b,
        a is not None and b is not None and a <= TARGET_SETUP_OF_SOCAT * b,
        None if a is None or b is None else "%.2f ms (socat %.2f, %.2fx)" % (a, b, a / b))
    add("new connection p50 <= %.2f x %s" % (TARGET_SETUP_OF_OTHER, name), None if a is None or c is None else a / c,
        a is not None and c is not None and a <= TARGET_SETUP_OF_OTHER * c,
        None if a is None or c is None else "%.2f ms (%s %.2f, %.2fx)" % (a, name, c, a / c))
    for d in ("upload", "download"):
        a, c = ours("par_%s_mib_s" % d), other("par_%s_mib_s" % d)
        add("%d %ss at once >= %.1f x %s aggregate" % (args.parallel, d, TARGET_PARALLEL_OF_OTHER, name),
            None if a is None or c is None else a / c,
            a is not None and c is not None and a >= TARGET_PARALLEL_OF_OTHER * c,
            None if a is None or c is None else "%.0f MiB/s (%s %.0f, %.2fx)" % (a, name, c, a / c))
    if args.conc_sizes:
        n = max(args.conc_sizes)
        v = summary["ours"].get("c%d_after_idle" % n)
        worst = None if v is None else v["min"]
        add("%s concurrent all working after idle (every repeat)" % "{:,}".format(TARGET_CONCURRENT),
            worst if n >= TARGET_CONCURRENT else None, worst == TARGET_CONCURRENT,
            None if worst is None else "{:,} of {:,}".format(worst, n))
        v = ours("c%d_rss_per_conn" % n)
        add("RSS per idle connection <= %d kB (%.1f KiB), at %d" % (TARGET_RSS_PER_CONN_KB, TARGET_RSS_PER_CONN_KB / 1.024, n),
            v, v is not None and v <= TARGET_RSS_PER_CONN_KB / 1.024, None if v is None else "%.1f KiB" % v)
    return out


def _cell(entry, digits):
    if entry is None:
        return "—"
    f = "{:,.%df}" % digits
    if entry["n"] == 1 or entry["min"] == entry["max"]:
        return f.format(entry["median"])
    return "%s [%s–%s]" % (f.format(entry["median"]), f.format(entry["min"]), f.format(entry["max"]))


cell = _cell   # for the other sections' tables (sshbench, stdiobench)


def section_summary(section_results, modes, rows):
    """Median / min / max per mode of each (measure, field, …) row of a section whose results
    are {mode: {measure: [entry, …]}}; key "measure_field", None where no entry has the field."""
    out = {}
    for mode in modes:
        per = out[mode] = {}
        for row in rows:
            measure, field = row[0], row[1]
            values = [e[field] for e in section_results.get(mode, {}).get(measure, [])
                      if e["ok"] and e.get(field) is not None]
            per["%s_%s" % (measure, field)] = None if not values else {
                "median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
    return out


def section_table(summary, modes, labels, rows, size):
    """The markdown table of a section summary: a column per mode, a row per (measure, field,
    label, digits); a "%s" in a label is the transfer size."""
    header = ["Measure"] + labels
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for measure, field, label, digits in rows:
        key = "%s_%s" % (measure, field)
        lines.append("| " + " | ".join([label % size if "%s" in label else label]
                                       + [_cell(summary[m].get(key), digits) for m in modes]) + " |")
    return lines


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
        command.strip(), args.repeats, "rounds %d, setups %d%s, concurrency %s, idle %g s" % (
            args.rounds, args.setups, " (%g ms apart)" % args.setup_gap_ms if args.setup_gap_ms else "", "/".join(str(n) for n in args.conc_sizes) or "-", args.idle),
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
        lines.append("Targets (issue 27) for cf-access-tcp:")
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
