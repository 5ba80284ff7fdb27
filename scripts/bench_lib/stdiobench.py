"""The `stdio` section: the tunnel as ssh's ProxyCommand runs it, one process per connection
with stdin and stdout on pipes, through the same edges and targets as the other sections.

  latency    64-byte ping-pong through the echo target: p50/p99 us (the process is started,
             warmed up, measured, then stopped)
  download   the `source` target's bytes (--bulk-mib) read from stdout to EOF, every byte checked;
             MiB/s from the first byte to the last, CPU s/GiB of the whole process (its life)
  upload     --bulk-mib MiB of the pattern written to stdin; MiB/s from the first write until the
             edge has passed every byte on (its stats), or, for socat, until it exited; then
             stdin is closed and the process must end by itself with 0

Modes: `ours` (cf-access-tcp without --url), `other` (--client-stdio-cmd, e.g. cloudflared
access tcp without --url) and `socat` (`socat - TCP:target`, the no-TLS floor).
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time

from . import loads, procs, report
from .procs import LOOPBACK, BenchError
from .sshbench import REAPER

MIB = 1 << 20
GIB = 1 << 30
MODE_LABELS = {"ours": "cf-access-tcp", "socat": "socat (no TLS)"}


def modes(args):
    """The section's modes, in the run's order: the run's modes that have a stdio form."""
    out = []
    for mode in args.modes:
        if mode == "ours" or mode == "socat" or (mode == "other" and args.client_stdio_cmd):
            out.append(mode)
    return out


def label(args, mode):
    return args.client_name if mode == "other" else MODE_LABELS[mode]


def argv(bench, mode, kind):
    edge = bench.edges[kind]
    if mode == "ours":
        return [bench.client_bin, "--hostname", bench.hostname, "--connect-to", edge.addr, "--ca-file", bench.ca,
                "--service-token-id", bench.token_id, "--service-token-secret", bench.token_secret]
    if mode == "socat":
        return ["socat", "-b", "131072", "-t", "0", "-", "TCP:%s:%d" % (LOOPBACK, bench.targets[kind])]
    values = {
        "hostname": bench.hostname, "edge": edge.addr, "edge_port": str(edge.port), "ca": bench.ca,
        "token_id": bench.token_id, "token_secret": bench.token_secret,
        "destination": "%s:%d" % (LOOPBACK, bench.targets[kind]), "bin_dir": bench.bin_dir,
    }
    return ["/bin/sh", "-c", procs.exec_form(bench.args.client_stdio_cmd.format_map(values))]


class Child:
    """One stdio-mode process under the reaper, its stdin and stdout pipes ours."""

    def __init__(self, bench, mode, kind, name):
        self.report = os.path.join(bench.workdir, "stdio-%s.json" % name)
        if os.path.exists(self.report):
            os.remove(self.report)
        self.log_path = os.path.join(bench.workdir, "stdio-%s.log" % name)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", REAPER, self.report] + argv(bench, mode, kind),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True, bufsize=0)
        self.stdin = self.proc.stdin.fileno()
        self.stdout = self.proc.stdout.fileno()

    def close_stdin(self):
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def finish(self, timeout):
        """Waits for the end; (status, CPU seconds) from the reaper, or raises on a timeout."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        if not os.path.exists(self.report):
            return None, None
        with open(self.report) as f:
            result = json.load(f)
        return result["status"], result["cpu"]

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.close_stdin()
        self.proc.stdout.close()

    def failed(self, error):
        """The result of a measure that failed with `error`: the process stopped, its stderr's end."""
        tail = self.stderr_tail()
        self.kill()
        return {"ok": False, "error": "%s%s" % (error, "; stderr: " + tail if tail else "")}

    def transferred(self, status, nbytes, seconds, cpu):
        """The result of a transfer of `nbytes` that took `seconds`, the process having ended with
        `status` after `cpu` seconds of CPU."""
        if status != 0:
            return {"ok": False, "error": "exit status %s; stderr: %s" % (status, self.stderr_tail())}
        return {"ok": True, "error": None, "mib_per_s": nbytes / MIB / seconds, "cpu_s_per_gib": cpu / (nbytes / GIB)}

    def stderr_tail(self):
        with open(self.log_path, "rb") as f:
            return f.read()[-600:].decode("utf-8", "replace").strip()


def _read_exactly(fd, count, deadline):
    got = bytearray()
    while len(got) < count:
        if time.monotonic() > deadline:
            raise BenchError("timed out after %d of %d bytes" % (len(got), count))
        chunk = os.read(fd, count - len(got))
        if not chunk:
            raise BenchError("EOF after %d of %d bytes" % (len(got), count))
        got += chunk
    return bytes(got)


def latency(bench, mode):
    args = bench.args
    child = Child(bench, mode, "echo", "latency-%s" % mode)
    timeout = (30 + args.rounds * 0.005) * args.slow
    deadline = time.monotonic() + timeout
    message = bytes(range(64))
    samples = []
    try:
        for i in range(args.warmup + args.rounds):
            t0 = time.perf_counter_ns()
            os.write(child.stdin, message)
            back = _read_exactly(child.stdout, len(message), deadline)
            t1 = time.perf_counter_ns()
            if back != message:
                raise BenchError("round %d came back different" % i)
            if i >= args.warmup:
                samples.append((t1 - t0) / 1000)
    except (BenchError, OSError) as e:
        return child.failed(e)
    child.kill()
    samples.sort()
    return {"ok": True, "error": None, "p50_us": loads.percentile(samples, 50), "p99_us": loads.percentile(samples, 99)}


def download(bench, mode):
    args = bench.args
    n = args.bulk_mib * MIB
    timeout = (30 + n / (5 * MIB)) * args.slow
    deadline = time.monotonic() + timeout
    child = Child(bench, mode, "source", "download-%s" % mode)
    got = 0
    t0 = None
    try:
        while True:
            if time.monotonic() > deadline:
                raise BenchError("timed out after %d of %d bytes" % (got, n))
            chunk = os.read(child.stdout, loads.RECV)
            if not chunk:
                break
            if t0 is None:
                t0 = time.perf_counter()
            if got + len(chunk) > n:
                raise BenchError("received more than %d bytes" % n)
            if not loads._expected(got % loads.PERIOD).startswith(chunk):
                raise BenchError("corrupt data in bytes %d-%d" % (got, got + len(chunk)))
            got += len(chunk)
        seconds = time.perf_counter() - t0 if t0 else None
        if got != n:
            raise BenchError("received %d of %d bytes before EOF" % (got, n))
        child.close_stdin()
        status, cpu = child.finish(max(1, deadline - time.monotonic()))
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        return child.failed(e)
    return child.transferred(status, n, seconds, cpu)


def upload(bench, mode):
    args = bench.args
    n = args.bulk_mib * MIB
    timeout = (30 + n / (5 * MIB)) * args.slow
    deadline = time.monotonic() + timeout
    edge = bench.edges["sink"]
    before = edge.stats()["bytesIn"]
    child = Child(bench, mode, "sink", "upload-%s" % mode)
    block = loads.pattern_chunk()
    sent = 0
    try:
        t0 = time.perf_counter()
        while sent < n:
            if time.monotonic() > deadline:
                raise BenchError("timed out after writing %d of %d bytes" % (sent, n))
            sent += os.write(child.stdin, block[:min(len(block), n - sent)])
        if mode == "socat":
            child.close_stdin()
            status, cpu = child.finish(max(1, deadline - time.monotonic()))
            seconds = time.perf_counter() - t0
        else:
            while edge.stats()["bytesIn"] - before < n:
                if time.monotonic() > deadline:
                    raise BenchError("timed out: the edge received %d of %d bytes" % (edge.stats()["bytesIn"] - before, n))
                time.sleep(0.002)
            seconds = time.perf_counter() - t0
            child.close_stdin()
            status, cpu = child.finish(max(1, deadline - time.monotonic()))
            if edge.stats()["bytesIn"] - before != n:
                raise BenchError("the edge received %d bytes, %d were sent" % (edge.stats()["bytesIn"] - before, n))
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        return child.failed(e)
    return child.transferred(status, n, seconds, cpu)


MEASURES = (("latency", latency), ("download", download), ("upload", upload))


class World:
    """The bench with the run's Access hostname and service token beside it."""

    def __init__(self, bench, hostname, token_id, token_secret):
        self._bench = bench
        self.hostname, self.token_id, self.token_secret = hostname, token_id, token_secret

    def __getattr__(self, name):
        return getattr(self._bench, name)


def run(bench, results, hostname, token_id, token_secret, log, fail):
    """The section: every measure and mode, the modes' order rotating, `repeats` times."""
    args = bench.args
    bench = World(bench, hostname, token_id, token_secret)
    order = modes(args)
    for rep in range(args.repeats):
        k = rep % len(order)
        for name, measure in MEASURES:
            for mode in order[k:] + order[:k]:
                out = measure(bench, mode)
                results.setdefault("stdio", {}).setdefault(mode, {}).setdefault(name, []).append(out)
                if not out["ok"]:
                    fail("stdio: %s %s: %s" % (label(args, mode), name, out["error"]))
                elif name == "latency":
                    log("stdio latency #%d %-14s p50 %.0f us  p99 %.0f us" % (rep + 1, label(args, mode), out["p50_us"], out["p99_us"]))
                else:
                    log("stdio %s #%d %-14s %7.1f MiB/s  %5.2f CPU-s/GiB" % (
                        name, rep + 1, label(args, mode), out["mib_per_s"], out["cpu_s_per_gib"]))


ROWS = (
    ("latency", "p50_us", "Round trip p50, us", 0),
    ("latency", "p99_us", "Round trip p99, us", 0),
    ("download", "mib_per_s", "Download %s, MiB/s", 0),
    ("download", "cpu_s_per_gib", "Download CPU s/GiB, whole process", 2),
    ("upload", "mib_per_s", "Upload %s, MiB/s", 0),
    ("upload", "cpu_s_per_gib", "Upload CPU s/GiB, whole process", 2),
)


def summarize(results, args):
    return report.section_summary(results.get("stdio", {}), modes(args), ROWS)


def markdown(summary, args, cell):
    size = "%d MiB" % args.bulk_mib if args.bulk_mib % 1024 else "%d GiB" % (args.bulk_mib // 1024)
    lines = ["Stdio mode (`stdio` section): one process per connection, stdin and stdout on pipes, "
             "as ssh's ProxyCommand runs it:", ""]
    lines += report.section_table(summary, modes(args), [label(args, m) for m in modes(args)], ROWS, size)
    lines.append("")
    lines.append("CPU = user+system seconds of the whole process over its life (start and TLS included).")
    lines.append("")
    return lines


def missing_numbers(summary, args):
    out = []
    for mode in modes(args):
        for measure, field, _, _ in ROWS:
            if summary[mode].get("%s_%s" % (measure, field)) is None:
                out.append("stdio %s: %s %s" % (label(args, mode), measure, field))
    return out


def placeholders_ok(template):
    """Whether `template` names only the section's placeholders (a typo fails before the run)."""
    try:
        template.format_map({k: "" for k in ("hostname", "edge", "edge_port", "ca", "token_id", "token_secret",
                                             "destination", "bin_dir")})
        shlex.split(template)
        return True
    except (KeyError, ValueError, IndexError):
        return False
