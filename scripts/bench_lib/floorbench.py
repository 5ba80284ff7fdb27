"""The `floor` section: the least user-space work a TLS 1.3 WebSocket relay does per GiB on this
machine, on one thread and with no socket (issue 27 point 1), beside what the relays measured.

scripts/bench_lib/tls_floor_probe.c (compiled here with gcc against Debian's libssl-dev) times:
a copy of 256 KiB blocks, WebSocket masking, AES-128-GCM sealing and opening straight from EVP in
TLS 1.3's record shape, and OpenSSL's own record layer (SSL_write, SSL_read) through BIOs that
copy the records out and in as the carrier's do. Every opened record and every byte read back is
checked. scripts/bench_lib/aead_floor_probe.c times the same sealing and opening with BoringSSL's
AEAD, the one the bridge's records use (RecordAEAD), linked with the BoringSSL objects of the build
the bench runs (`<bin-dir>/CCryptoBoringSSL.build`; without them, with a copied binary, those two
rows stay empty and the floor uses OpenSSL's AEAD). With the bulk section's socat figures in the
same run, the section says how close to socat a TLS relay can come at best: socat's copies plus
sealing and masking up, plus opening down, with the AEAD the client uses.
"""

import glob
import json
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE_SOURCE = os.path.join(HERE, "tls_floor_probe.c")
AEAD_PROBE_SOURCE = os.path.join(HERE, "aead_floor_probe.c")
SHIM_INCLUDE = os.path.join(HERE, "..", "..", "Sources", "CCFShim", "include")
MAX_MIB = 2048   # the probe holds about three times its size in memory

# (probe field, label)
ROWS = (
    ("copy", "memcpy of a 240 KiB window into a buffer (what a recv() copies)"),
    ("mask", "WebSocket masking, in place"),
    ("seal", "AES-128-GCM seal, EVP, in place, 16 KiB records"),
    ("open", "AES-128-GCM open, EVP, in place, tags checked"),
    ("tls_write", "SSL_write (OpenSSL's record layer), records copied out as the carrier's BIO does"),
    ("tls_read", "SSL_read (OpenSSL's record layer), records copied in as the carrier's BIO does"),
    ("bssl_seal", "AES-128-GCM seal, BoringSSL's AEAD (the bridge's records), in place, 16 KiB records"),
    ("bssl_open", "AES-128-GCM open, BoringSSL's AEAD (the bridge's records), in place, tags checked"),
)
# The rows of aead_floor_probe, measured only when the build's BoringSSL objects are there.
BORINGSSL_FIELDS = ("bssl_seal", "bssl_open")


def mib(args):
    return max(4, min(args.bulk_mib, MAX_MIB))


def build(workdir):
    gcc = shutil.which("gcc")
    if not gcc:
        raise RuntimeError("gcc is missing: apt-get install gcc")
    out = os.path.join(workdir, "tls_floor_probe")
    built = subprocess.run([gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", out, PROBE_SOURCE, "-lssl", "-lcrypto"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError("building %s failed (libssl-dev installed?):\n%s" % (PROBE_SOURCE, built.stderr))
    return out


def build_boringssl(workdir, bin_dir):
    """aead_floor_probe linked with the BoringSSL objects of the build in `bin_dir`; None (with the
    reason) when that build has none (a directory of copied binaries)."""
    objects = sorted(glob.glob(os.path.join(bin_dir, "CCryptoBoringSSL.build", "**", "*.o"), recursive=True))
    if not objects:
        return None, "no BoringSSL objects under %s/CCryptoBoringSSL.build (a copied binary?)" % bin_dir
    gcc, gxx = shutil.which("gcc"), shutil.which("g++")
    if not gcc or not gxx:
        raise RuntimeError("gcc and g++ are needed: apt-get install g++")
    obj = os.path.join(workdir, "aead_floor_probe.o")
    out = os.path.join(workdir, "aead_floor_probe")
    for argv in ([gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-I", SHIM_INCLUDE, "-c", AEAD_PROBE_SOURCE, "-o", obj],
                 [gxx, "-o", out, obj] + objects + ["-lpthread"]):
        built = subprocess.run(argv, capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError("building %s failed:\n%s" % (AEAD_PROBE_SOURCE, built.stderr[-2000:]))
    return out, None


def run(bench, results, log, fail):
    try:
        probe = build(bench.workdir)
        aead_probe, absent = build_boringssl(bench.workdir, bench.bin_dir)
    except RuntimeError as e:
        fail("floor: %s" % e)
        return
    section = results.setdefault("floor", {})
    if absent:
        section["boringssl_absent"] = absent
        log("floor: BoringSSL's AEAD not measured: %s" % absent)
    entries = section.setdefault("probe", {}).setdefault("run", [])
    for rep in range(bench.args.repeats):
        done = subprocess.run([probe, str(mib(bench.args)), bench.cert, bench.key], capture_output=True, text=True,
                              timeout=600 * bench.args.slow)
        if done.returncode != 0:
            fail("floor #%d: the probe failed: %s" % (rep + 1, (done.stderr or done.stdout).strip()))
            entries.append({"ok": False})
            continue
        entry = json.loads(done.stdout)
        if aead_probe:
            more = subprocess.run([aead_probe, str(mib(bench.args))], capture_output=True, text=True,
                                  timeout=600 * bench.args.slow)
            if more.returncode != 0:
                fail("floor #%d: the BoringSSL probe failed: %s" % (rep + 1, (more.stderr or more.stdout).strip()))
                entries.append({"ok": False})
                continue
            entry.update(json.loads(more.stdout))
        entry["ok"] = True
        entries.append(entry)
        log("floor #%d %s" % (rep + 1, "  ".join("%s %.3f" % (field, entry[field]) for field, _ in ROWS if field in entry)))


def summarize(results, report):
    section = results.get("floor", {})
    summary = report.section_summary(section, ["probe"], [("run", field) for field, _ in ROWS])["probe"]
    summary["boringssl_absent"] = section.get("boringssl_absent")
    entries = [e for e in section.get("probe", {}).get("run", []) if e["ok"]]
    summary["cipher"] = entries[0]["cipher"] if entries else None
    summary["openssl"] = entries[0]["openssl"] if entries else None
    return summary


def _median(summary, key):
    v = summary.get(key)
    return None if v is None else v["median"]


def least(summary, main_summary, target_over_socat):
    """What a TLS WebSocket relay costs here at best, from socat's medians in the same run:
    {direction: {"socat", "floor", "target"}}; empty without socat's bulk figures."""
    out = {}
    socat = main_summary.get("socat", {})
    # The AEAD the bridge's records use (BoringSSL's) when it was measured, else OpenSSL's.
    boring = _median(summary, "run_bssl_seal") is not None and _median(summary, "run_bssl_open") is not None
    parts = {"upload": ("run_bssl_seal" if boring else "run_seal", "run_mask"),
             "download": ("run_bssl_open" if boring else "run_open",)}
    for direction, keys in parts.items():
        s = socat.get("%s_cpu_client" % direction)
        values = [_median(summary, k) for k in keys]
        if s is None or None in values:
            continue
        out[direction] = {"socat": s["median"], "floor": s["median"] + sum(values),
                          "target": s["median"] + target_over_socat,
                          "aead": "BoringSSL" if boring else "OpenSSL"}
    return out


def markdown(summary, main_summary, args, cell, target_over_socat):
    lines = ["", "### Floor: a TLS 1.3 WebSocket relay's own work, one thread, no socket", "",
             "`tls_floor_probe` and `aead_floor_probe`, %d MiB, %d repeat(s), median [min–max]; %s, %s%s." % (
                 mib(args), args.repeats, summary.get("cipher") or "—", summary.get("openssl") or "—",
                 "; BoringSSL's AEAD not measured: " + summary["boringssl_absent"] if summary.get("boringssl_absent") else ""), "",
             "| Work | CPU s/GiB |", "|---|---|"]
    for field, label in ROWS:
        lines.append("| %s | %s |" % (label, cell(summary.get("run_" + field), 3)))
    lines.append("")
    over = [(_median(summary, "run_tls_" + a), _median(summary, "run_" + b)) for a, b in (("write", "seal"), ("read", "open"))]
    if None not in (v for pair in over for v in pair):
        lines.append("OpenSSL's record layer over the AEAD alone: SSL_write %+.3f, SSL_read %+.3f s/GiB." % (
            over[0][0] - over[0][1], over[1][0] - over[1][1]))
        lines.append("")
    best = least(summary, main_summary, target_over_socat)
    if best:
        lines.append("Least client CPU a TLS WebSocket relay can spend here (socat's, plus sealing and masking "
                     "up, plus opening down, with %s's AEAD), beside target 1 (socat + %.2f):"
                     % (next(iter(best.values()))["aead"], target_over_socat))
        lines.append("")
        lines.append("| Direction | socat | socat + crypto (+ mask) | target |")
        lines.append("|---|---|---|---|")
        for direction, v in best.items():
            lines.append("| %s | %.2f | %.2f | %.2f |" % (direction, v["socat"], v["floor"], v["target"]))
        lines.append("")
    return lines


def missing_numbers(summary):
    """Every row without a number, but BoringSSL's when the build had no objects to link."""
    skipped = BORINGSSL_FIELDS if summary.get("boringssl_absent") else ()
    return ["floor: %s" % label for field, label in ROWS if summary.get("run_" + field) is None and field not in skipped]
