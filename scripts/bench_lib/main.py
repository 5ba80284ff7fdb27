"""scripts/bench: cf-access-tcp against direct loopback TCP, a socat relay and (optionally) any
other tunnel client, through the local edge emulator, in one run. See `scripts/bench --help`.
"""

import argparse
import atexit
import http.client
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time

from . import floorbench, loads, procs, report, sshbench, stdiobench
from .procs import LOOPBACK, BenchError

HOSTNAME = "bench.cfat.test"
TOKEN_ID = "cfat-bench.access"
TOKEN_SECRET = "bench-only-service-token-secret-0123456789"
GIB = 1 << 30
MIB = 1 << 20

MODE_LABELS = {"ours": "cf-access-tcp", "socat": "socat relay", "direct": "direct TCP"}
SECTIONS = ("integrity", "bulk", "latency", "setup", "parallel", "concurrency", "ssh", "stdio", "floor")
TUNNEL_MODES = ("ours", "other")

PLACEHOLDERS = ("hostname", "listen", "listen_port", "edge", "edge_port", "ca", "token_id",
                "token_secret", "destination", "bin_dir")


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# command line

def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="scripts/bench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmark cf-access-tcp through the local edge emulator against direct "
                    "loopback TCP and a socat relay (and optionally another tunnel client).",
        epilog="""\
Measures (each repeated; median [min-max]):
  bulk         1 GiB upload (-> sink) and download (<- source): MiB/s, CPU s/GiB of the client
               and of the edge emulator (utime+stime from /proc, before/after)
  latency      64-byte ping-pong through the echo target: p50/p99/p99.9 us
  setup        sequential new connections, connect() to first echoed byte: p50/p99 ms
  parallel     8 transfers at once (128 MiB each) up and down through one client: aggregate MiB/s
               and CPU s/GiB of the client (a listener that uses every core shows it here)
  concurrency  1,000 then 5,000 concurrent connections, each echoes, checked again after idle:
               how many worked, client RSS idle and per connection, fds per connection
  ssh          1 GiB down and up through an SSH session to a real sshd behind the emulator:
               `cf-access-tcp shell` vs `ssh -o ProxyCommand='cf-access-tcp …'` vs plain ssh:
               MiB/s, CPU s/GiB of the whole client, longest pause between chunks
  stdio        one process per connection on pipes, as ssh's ProxyCommand runs it (cf-access-tcp
               without --url, --client-stdio-cmd, `socat -`): 64-byte round trip p50/p99, the
               bulk size down and up: MiB/s, CPU s/GiB of the whole process
  floor        two C probes (gcc, libssl-dev), one thread, no socket: CPU s/GiB of a copy, masking,
               AES-128-GCM seal and open straight from EVP, OpenSSL's SSL_write/SSL_read, and
               seal and open with BoringSSL's AEAD (the build's own objects, as the records use it);
               with the bulk section's socat figures, the least a TLS WebSocket relay can spend
Every figure is also given as a ratio to direct TCP and to the socat relay.

--client-cmd placeholders: {hostname} {listen} (127.0.0.1:PORT) {listen_port} {edge}
(127.0.0.1:PORT of the edge emulator for this target) {edge_port} {ca} {token_id} {token_secret}
{destination} (the target behind the edge) {bin_dir}. The command runs through /bin/sh; the bench
waits until something listens on {listen}. The edge certificate is valid for {hostname} and
127.0.0.1. Example (cloudflared, which trusts SSL_CERT_FILE):
  --client-cmd 'SSL_CERT_FILE={ca} cloudflared access tcp --hostname https://{edge}
                --url {listen} --service-token-id {token_id} --service-token-secret {token_secret}'

--client-stdio-cmd: the same client in stdio mode (no {listen}), for the stdio section; the
placeholders above but {listen} and {listen_port}. Example:
  --client-stdio-cmd 'SSL_CERT_FILE={ca} cloudflared access tcp --hostname https://{edge}
                      --service-token-id {token_id} --service-token-secret {token_secret}'

Exit status: 0 when every measurement produced its numbers and all bytes arrived intact
(--quick also requires every concurrent connection to work); 1 otherwise; 2 on usage errors.
Only 127.0.0.1 is ever used.""")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke test: 64 MiB bulk, 1,000 round trips, 50 setups, 100 concurrent, "
                        "2 s idle, 1 repeat (< 2 min once built)")
    p.add_argument("--repeats", type=int, help="repeats of every measurement (default 3; quick 1)")
    p.add_argument("--bulk-mib", type=int, help="bulk transfer size in MiB (default 1024; quick 64)")
    p.add_argument("--rounds", type=int, help="ping-pong round trips (default 10000; quick 1000)")
    p.add_argument("--setups", type=int, help="sequential new connections (default 200; quick 50)")
    p.add_argument("--setup-gap-ms", type=float, default=0.0,
                   help="pause between two sequential new connections of the setup section, in ms "
                        "(default 0: back to back)")
    p.add_argument("--concurrency", help="comma-separated concurrent connection counts "
                                         "(default 1000,5000; quick 100)")
    p.add_argument("--idle", type=float, help="idle seconds before re-checking concurrent connections "
                                              "(default 30; quick 2)")
    p.add_argument("--integrity-mib", type=int, help="echo integrity check size in MiB (default 64; quick 16)")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help="comma-separated subset of %s" % ",".join(SECTIONS))
    p.add_argument("--parallel", type=int, help="transfers at once in the parallel section (default 8; quick 4)")
    p.add_argument("--parallel-mib", type=int, help="size of each parallel transfer in MiB (default 128; quick 16)")
    p.add_argument("--ssh-mib", type=int, help="ssh section transfer size in MiB (default 1024; quick 64)")
    p.add_argument("--ssh-modes", default=",".join(sshbench.MODES),
                   help="comma-separated subset of %s for the ssh section (default: the first three; "
                        "the -tt ones measure downloads only)" % ",".join(sshbench.ALL_MODES))
    p.add_argument("--modes", default="ours,other,socat,direct",
                   help="comma-separated subset of ours,other,socat,direct (other only with --client-cmd)")
    p.add_argument("--client-cmd", metavar="TEMPLATE", help="another tunnel client to run alongside ours")
    p.add_argument("--client-stdio-cmd", metavar="TEMPLATE",
                   help="the --client-cmd client in stdio mode, for the stdio section")
    p.add_argument("--client-name", help="column name for --client-cmd (default: its program name)")
    p.add_argument("--json", metavar="FILE", help="also write all results as JSON to FILE")
    p.add_argument("--scratch-path", default=".build", help="swift build scratch path (default .build)")
    p.add_argument("--bin-dir", help="use the cf-access-tcp and cf-access-edge in this directory; no build")
    p.add_argument("--time-limit", type=float,
                   help="abort (and clean up) after this many seconds (default 1800; quick 300)")
    p.add_argument("--keep-workdir", action="store_true", help="keep certificates and logs")
    p.add_argument("--ours-wrapper", metavar="PREFIX",
                   help="run cf-access-tcp under this command prefix, for profiling ({name} = e.g. "
                        "ours-sink-2, unique per process), e.g. 'valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.{name}'; "
                        "timeouts are then 20x longer and its figures are the wrapper's")
    p.add_argument("--edge-wrapper", metavar="PREFIX",
                   help="run each edge emulator (cf-access-edge serve) under this command prefix, for profiling "
                        "({name} = edge-echo, edge-sink or edge-source), e.g. 'valgrind --tool=callgrind "
                        "--callgrind-out-file=/tmp/cg.{name}'; timeouts are then 20x longer and the edge's figures "
                        "are the wrapper's")
    args = p.parse_args(argv)

    q = args.quick
    def default(name, full, quick):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    default("repeats", 3, 1)
    default("bulk_mib", 1024, 64)
    default("rounds", 10000, 1000)
    default("setups", 200, 50)
    default("concurrency", "1000,5000", "100")
    default("idle", 30.0, 2.0)
    default("integrity_mib", 64, 16)
    default("parallel", 8, 4)
    default("parallel_mib", 128, 16)
    default("ssh_mib", 1024, 64)
    default("time_limit", 1800.0, 300.0)
    args.warmup = 50 if q else 200
    args.slow = 20 if args.ours_wrapper or args.edge_wrapper else 1
    try:
        args.conc_sizes = [int(x) for x in args.concurrency.split(",") if x.strip()]
    except ValueError:
        p.error("--concurrency must be comma-separated integers")
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    for s in args.sections:
        if s not in SECTIONS:
            p.error("unknown section %r" % s)
    args.ssh_modes = [m.strip() for m in args.ssh_modes.split(",") if m.strip()]
    for m in args.ssh_modes:
        if m not in sshbench.ALL_MODES:
            p.error("unknown ssh mode %r" % m)
    if "ssh" in args.sections and not args.ssh_modes:
        p.error("--ssh-modes is empty")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in ("ours", "other", "socat", "direct"):
            p.error("unknown mode %r" % m)
    if not args.client_cmd:
        modes = [m for m in modes if m != "other"]
    elif "other" not in modes:
        p.error("--client-cmd given but 'other' is not in --modes")
    if args.client_cmd:
        try:
            args.client_cmd.format_map({k: "x" for k in PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as e:
            p.error("--client-cmd: unknown or malformed placeholder %s (use {{ }} for literal braces)" % e)
        if "{listen}" not in args.client_cmd and "{listen_port}" not in args.client_cmd:
            p.error("--client-cmd must contain {listen} or {listen_port}")
        if not args.client_name:
            words = [w for w in shlex.split(args.client_cmd) if "=" not in w.split("/")[0]]
            args.client_name = os.path.basename(words[0]) if words else "other"
    if args.client_stdio_cmd:
        if not args.client_cmd:
            p.error("--client-stdio-cmd needs --client-cmd (the same client, for the other sections)")
        if not stdiobench.placeholders_ok(args.client_stdio_cmd):
            p.error("--client-stdio-cmd: unknown or malformed placeholder (use {{ }} for literal braces)")
    args.modes = modes
    if args.parallel < 1 or args.parallel_mib < 1:
        p.error("--parallel and --parallel-mib must be positive")
    if args.repeats < 1 or args.ssh_mib < 1 or args.bulk_mib < 1 or args.rounds < 1 or args.setups < 1 or args.idle < 0 \
            or args.setup_gap_ms < 0:
        p.error("counts must be positive")
    if "socat" in modes and not shutil.which("socat"):
        p.error("socat is not installed (apt-get install socat, or --modes without socat)")
    return args


# ---------------------------------------------------------------------------------------------
# the machine

def machine_description():
    def first(path, prefix):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(prefix):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "unknown"

    def run(cmd):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            return "unknown"

    mem_kb = first("/proc/meminfo", "MemTotal").split()[0]
    try:
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
    except OSError:
        load = "unknown"
    return {
        "nproc": os.cpu_count(),
        "cpu_model": first("/proc/cpuinfo", "model name"),
        "memory_gib": round(int(mem_kb) / (1 << 20), 1) if mem_kb.isdigit() else None,
        "kernel": platform.release(),
        "loadavg_end": load,
        "os": read_os_release_name(),
        "python": platform.python_version(),
        "swift": run(["swift", "--version"]),
        "openssl": run(["openssl", "version"]),
        "socat": socat_version(),
    }


def socat_version():
    if not shutil.which("socat"):
        return None
    try:
        out = subprocess.run(["socat", "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for line in out.splitlines():
        if line.startswith("socat version"):
            return line.strip()
    return "unknown"


def read_os_release_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return "unknown"


# ---------------------------------------------------------------------------------------------
# build

def build_flags(root):
    """The flags of every build of ours (scripts/build-flags): warnings as errors, and the same
    binaries as scripts/test's release build."""
    with open(os.path.join(root, "scripts", "build-flags"), encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip() and not line.startswith("#")]


def build(args, root):
    if args.bin_dir:
        bin_dir = os.path.abspath(args.bin_dir)
    else:
        cmd = ["swift", "build", "-c", "release", "--scratch-path", args.scratch_path] + build_flags(root)
        log("building: %s" % " ".join(cmd))
        t0 = time.monotonic()
        out = subprocess.run(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if out.returncode != 0:
            sys.stderr.write(out.stdout[-4000:])
            raise BenchError("the release build failed")
        log("build done in %.0f s" % (time.monotonic() - t0))
        bin_dir = subprocess.run(cmd + ["--show-bin-path"], cwd=root, capture_output=True,
                                 text=True, check=True).stdout.strip()
    for name in ("cf-access-tcp", "cf-access-edge"):
        if not os.access(os.path.join(bin_dir, name), os.X_OK):
            raise BenchError("%s not found in %s" % (name, bin_dir))
    return bin_dir


# ---------------------------------------------------------------------------------------------
# the fixed parts of a run: certificates, targets, edges

class Edge:
    def __init__(self, kind, proc, port, ca, timeout=10):
        self.kind, self.proc, self.port, self.ca = kind, proc, port, ca
        self.timeout = timeout
        ctx = ssl.create_default_context(cafile=ca)
        self._ctx = ctx
        self._conn = None

    @property
    def addr(self):
        return "%s:%d" % (LOOPBACK, self.port)

    def stats(self):
        for attempt in range(2):
            try:
                if self._conn is None:
                    self._conn = http.client.HTTPSConnection(LOOPBACK, self.port, context=self._ctx,
                                                             timeout=self.timeout)
                self._conn.request("GET", "/cdn-cgi/edge/stats")
                resp = self._conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    raise BenchError("edge stats answered %d" % resp.status)
                return json.loads(body)
            except (OSError, http.client.HTTPException):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                if attempt:
                    raise
        return None

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Relay:
    """Something that listens on 127.0.0.1 and carries connections to one target kind."""

    def __init__(self, mode, kind, proc, port, edge=None):
        self.mode, self.kind, self.proc, self.port, self.edge = mode, kind, proc, port, edge
        self.rss_start_kb = None

    @property
    def addr(self):
        return (LOOPBACK, self.port)


class Bench:
    def __init__(self, args, bin_dir, workdir, client_nofile):
        self.args = args
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.client_nofile = client_nofile
        self.procs = procs.Processes(workdir)
        self.targets = {}     # kind -> port
        self.edges = {}       # kind -> Edge
        self.relays = {}      # (mode, kind) -> Relay (long-lived)
        self.failures = []    # plain messages of failed checks
        self.wrapped = 0      # clients started under --ours-wrapper
        self.edge_bin = os.path.join(bin_dir, "cf-access-edge")
        self.client_bin = os.path.join(bin_dir, "cf-access-tcp")

    def fail(self, what):
        log("FAILED: %s" % what)
        self.failures.append(what)

    # -- infrastructure -----------------------------------------------------------------------

    def start_infrastructure(self):
        certs = os.path.join(self.workdir, "certs")
        out = subprocess.run([self.edge_bin, "certs", "--out", certs, "--host", HOSTNAME, "--host", LOOPBACK],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise BenchError("cf-access-edge certs failed:\n%s%s" % (out.stdout, out.stderr))
        self.ca = os.path.join(certs, "ca.pem")
        self.cert = os.path.join(certs, "server.pem")
        self.key = os.path.join(certs, "server-key.pem")
        # "psource": the source of the parallel section, each connection its share.
        kinds = ("echo", "sink", "source") + (("psource",) if "parallel" in self.args.sections else ())
        for kind in kinds:
            argv = [self.edge_bin, "target", {"psource": "source"}.get(kind, kind), "--listen", "%s:0" % LOOPBACK]
            if kind == "source":
                argv += ["--bytes", str(self.args.bulk_mib * MIB)]
            elif kind == "psource":
                argv += ["--bytes", str(self.args.parallel_mib * MIB)]
            proc = self.procs.start("target-" + kind, argv)
            line = self.procs.wait_for_line(proc, "listening on")
            self.targets[kind] = int(line.rsplit(":", 1)[1])
        for kind in kinds:
            self.edges[kind] = self.start_edge(kind, "%s:%d" % (LOOPBACK, self.targets[kind]))
        log("targets %s; edges %s" % (
            ", ".join("%s %d" % kv for kv in self.targets.items()),
            ", ".join("%s %d" % (k, e.port) for k, e in self.edges.items())))

    def start_edge(self, kind, target):
        """An edge emulator in front of `target` (host:port), with the run's certificate and token."""
        argv = [self.edge_bin, "serve", "--listen", "%s:0" % LOOPBACK, "--cert", self.cert, "--key", self.key,
                "--target", target, "--service-token", "%s:%s" % (TOKEN_ID, TOKEN_SECRET)]
        if self.args.edge_wrapper:
            argv = shlex.split(self.args.edge_wrapper.replace("{name}", "edge-" + kind)) + argv
        proc = self.procs.start("edge-" + kind, argv)
        if self.args.edge_wrapper:
            proc.grace = 60.0   # a profiler writes its output on SIGTERM
        line = self.procs.wait_for_line(proc, "cf-access-edge listening on", timeout=30 * self.args.slow)
        edge = Edge(kind, proc, int(line.rsplit(":", 1)[1]), self.ca, timeout=10 * self.args.slow)
        edge.stats()  # the edge answers, TLS to it verifies
        return edge

    def start_relay(self, mode, kind):
        """Starts a fresh client/relay of `mode` for target `kind`; None for direct."""
        if mode == "direct":
            return Relay(mode, kind, None, self.targets[kind])
        edge = self.edges[kind]
        if mode == "ours":
            argv = [self.client_bin, "--hostname", HOSTNAME, "--url", "%s:0" % LOOPBACK,
                    "--connect-to", edge.addr, "--ca-file", self.ca,
                    "--service-token-id", TOKEN_ID, "--service-token-secret", TOKEN_SECRET]
            if self.args.ours_wrapper:
                argv += ["--connect-timeout", "120"]   # TLS under a profiler is slow
                self.wrapped += 1
                name = "ours-%s-%d" % (kind, self.wrapped)
                argv = shlex.split(self.args.ours_wrapper.replace("{name}", name)) + argv
            proc = self.procs.start("ours-" + kind, argv, nofile=self.client_nofile)
            if self.args.ours_wrapper:
                proc.grace = 60.0
            line = self.procs.wait_for_line(proc, "cf-access-tcp: listening on", timeout=30 * self.args.slow)
            port = int(line.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])
        elif mode == "socat":
            port = procs.free_port()
            argv = ["socat", "-b", "131072",
                    "TCP-LISTEN:%d,fork,reuseaddr,bind=%s,backlog=4096" % (port, LOOPBACK),
                    "TCP:%s:%d" % (LOOPBACK, self.targets[kind])]
            proc = self.procs.start("socat-" + kind, argv, nofile=self.client_nofile)
            procs.wait_listening(proc, port)
        else:
            port = procs.free_port()
            values = {
                "hostname": HOSTNAME, "listen": "%s:%d" % (LOOPBACK, port), "listen_port": str(port),
                "edge": edge.addr, "edge_port": str(edge.port), "ca": self.ca, "token_id": TOKEN_ID,
                "token_secret": TOKEN_SECRET, "destination": "%s:%d" % (LOOPBACK, self.targets[kind]),
                "bin_dir": self.bin_dir,
            }
            cmd = procs.exec_form(self.args.client_cmd.format_map(values))
            proc = self.procs.start("other-" + kind, cmd, shell=True, nofile=self.client_nofile)
            procs.wait_listening(proc, port)
        relay = Relay(mode, kind, proc, port, edge if mode in TUNNEL_MODES else None)
        time.sleep(0.3)
        if proc.alive():
            relay.rss_start_kb = procs.memory_kb(proc.pid)[0]
        return relay

    def relay(self, mode, kind):
        key = (mode, kind)
        r = self.relays.get(key)
        if r is None or (r.proc is not None and not r.proc.alive()):
            if r is not None:
                self.fail("%s for %s exited (status %s); restarted:\n%s"
                          % (self.label(mode), kind, r.proc.popen.returncode, r.proc.log_tail()))
            r = self.relays[key] = self.start_relay(mode, kind)
        return r

    def stop_relay(self, relay):
        if relay.proc is not None:
            self.procs.stop(relay.proc)

    def label(self, mode):
        return self.args.client_name if mode == "other" else MODE_LABELS[mode]

    def order(self, rep):
        """Modes in a rotating order, so every mode alternates with ours across repeats."""
        modes = self.args.modes
        k = rep % len(modes)
        return modes[k:] + modes[:k]

    # -- measurements -------------------------------------------------------------------------

    def run_integrity(self, results):
        n = self.args.integrity_mib * MIB
        for mode in self.args.modes:
            r = self.relay(mode, "echo")
            res = loads.echo_integrity(r.addr, n, timeout=max(30, n / MIB) * self.args.slow)
            results.setdefault(mode, {})["integrity"] = dict(res)
            if not res["ok"]:
                self.fail("%s: echo integrity (%d MiB): %s" % (self.label(mode), self.args.integrity_mib, res["error"]))
            else:
                log("integrity %-14s %d MiB echoed intact (%.0f MiB/s)" % (
                    self.label(mode), self.args.integrity_mib, res["mib_per_s"]))

    def bulk_once(self, mode, direction):
        kind = "sink" if direction == "upload" else "source"
        r = self.relay(mode, kind)
        edge = self.edges[kind]
        n = self.args.bulk_mib * MIB
        timeout = (30 + n / (5 * MIB)) * self.args.slow   # at least 5 MiB/s, else it counts as failed
        pid = r.proc.pid if r.proc else None
        stats0 = edge.stats()
        cpu_client0 = procs.cpu_seconds(pid, tree=True) if pid else None
        cpu_edge0 = procs.cpu_seconds(edge.proc.pid)
        self_0 = resource.getrusage(resource.RUSAGE_SELF)
        if direction == "upload":
            delivered = None
            if r.edge is not None:
                def delivered(deadline, before=stats0["bytesIn"]):
                    while True:
                        got = edge.stats()["bytesIn"] - before
                        if got >= n:
                            return None if got == n else "edge received %d bytes, sent %d" % (got, n)
                        if time.monotonic() > deadline:
                            return "timed out: the edge received %d of %d bytes" % (got, n)
                        time.sleep(0.002)
            res = loads.bulk_upload(r.addr, n, timeout, delivered)
        else:
            res = loads.bulk_download(r.addr, n, timeout)
        time.sleep(0.2)   # let a forked relay child exit and be reaped, so its CPU is counted
        self_1 = resource.getrusage(resource.RUSAGE_SELF)
        out = {"ok": res["ok"], "error": res["error"]}
        if res["ok"]:
            gib = n / GIB
            out["mib_per_s"] = n / MIB / res["seconds"]
            out["seconds"] = res["seconds"]
            if pid:
                out["cpu_client_s_per_gib"] = (procs.cpu_seconds(pid, tree=True) - cpu_client0) / gib
            if r.edge is not None:
                out["cpu_edge_s_per_gib"] = (procs.cpu_seconds(edge.proc.pid) - cpu_edge0) / gib
                stats1 = edge.stats()
                key = "bytesIn" if direction == "upload" else "bytesOut"
                fkey = "binaryFramesIn" if direction == "upload" else "binaryFramesOut"
                frames = stats1[fkey] - stats0[fkey]
                out["edge_bytes"] = stats1[key] - stats0[key]
                out["frames"] = frames
                out["avg_frame_bytes"] = out["edge_bytes"] / frames if frames else None
                if out["edge_bytes"] != n:
                    out["ok"] = False
                    out["error"] = "the edge carried %d bytes, expected %d" % (out["edge_bytes"], n)
            out["bench_cpu_s_per_gib"] = ((self_1.ru_utime + self_1.ru_stime)
                                          - (self_0.ru_utime + self_0.ru_stime)) / gib
        if not out["ok"]:
            self.fail("%s: %s %d MiB: %s" % (self.label(mode), direction, self.args.bulk_mib, out["error"]))
        return out

    def run_bulk(self, results):
        for rep in range(self.args.repeats):
            for direction in ("upload", "download"):
                for mode in self.order(rep):
                    out = self.bulk_once(mode, direction)
                    results.setdefault(mode, {}).setdefault(direction, []).append(out)
                    if out["ok"]:
                        log("bulk %s #%d %-14s %7.1f MiB/s  client %s CPU-s/GiB  edge %s CPU-s/GiB" % (
                            direction, rep + 1, self.label(mode), out["mib_per_s"],
                            _fmt(out.get("cpu_client_s_per_gib")), _fmt(out.get("cpu_edge_s_per_gib"))))

    def parallel_once(self, mode, direction):
        """`--parallel` transfers of `--parallel-mib` each at once through one client (or direct):
        aggregate MiB/s from the first connect to the last delivery, and the client's CPU."""
        kind = "sink" if direction == "upload" else "psource"
        r = self.relay(mode, kind)
        edge = self.edges[kind]
        k, each = self.args.parallel, self.args.parallel_mib * MIB
        total = k * each
        timeout = (30 + total / (5 * MIB)) * self.args.slow
        pid = r.proc.pid if r.proc else None
        stats0 = edge.stats()
        cpu0 = procs.cpu_seconds(pid, tree=True) if pid else None
        outcomes = [None] * k

        def one(i):
            if direction == "upload":
                # Through a tunnel each stream is done once sent; the edge's counter says when all
                # arrived. Direct and socat: the sink closing.
                sent = (lambda deadline: None) if r.edge is not None else None
                outcomes[i] = loads.bulk_upload(r.addr, each, timeout, sent)
            else:
                outcomes[i] = loads.bulk_download(r.addr, each, timeout)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 5)
        out = {"ok": True, "error": None, "streams": k, "bytes": total}
        bad = [o for o in outcomes if o is None or not o["ok"]]
        if bad:
            out["ok"] = False
            out["error"] = "%d of %d transfers failed: %s" % (
                len(bad), k, bad[0]["error"] if bad[0] is not None else "did not finish")
        elif direction == "upload" and r.edge is not None:
            deadline = time.monotonic() + timeout
            while True:
                got = edge.stats()["bytesIn"] - stats0["bytesIn"]
                if got >= total:
                    if got != total:
                        out["ok"], out["error"] = False, "edge received %d bytes, sent %d" % (got, total)
                    break
                if time.monotonic() > deadline:
                    out["ok"], out["error"] = False, "timed out: the edge received %d of %d bytes" % (got, total)
                    break
                time.sleep(0.002)
        seconds = time.perf_counter() - t0
        time.sleep(0.2)   # forked relay children exit and are reaped
        if out["ok"]:
            out["mib_per_s"] = total / MIB / seconds
            out["seconds"] = seconds
            if pid:
                out["cpu_client_s_per_gib"] = (procs.cpu_seconds(pid, tree=True) - cpu0) / (total / GIB)
        else:
            self.fail("%s: %d parallel %ss of %d MiB: %s" % (self.label(mode), k, direction,
                                                             self.args.parallel_mib, out["error"]))
        return out

    def run_parallel(self, results):
        for rep in range(self.args.repeats):
            for direction in ("upload", "download"):
                for mode in self.order(rep):
                    out = self.parallel_once(mode, direction)
                    results.setdefault(mode, {}).setdefault("parallel_" + direction, []).append(out)
                    if out["ok"]:
                        log("parallel %s #%d %-14s %7.1f MiB/s aggregate (%d at once)  client %s CPU-s/GiB" % (
                            direction, rep + 1, self.label(mode), out["mib_per_s"], out["streams"],
                            _fmt(out.get("cpu_client_s_per_gib"))))

    def run_latency(self, results):
        for rep in range(self.args.repeats):
            for mode in self.order(rep):
                r = self.relay(mode, "echo")
                res = loads.latency(r.addr, self.args.rounds, self.args.warmup,
                                    timeout=(30 + self.args.rounds * 0.005) * self.args.slow)
                results.setdefault(mode, {}).setdefault("latency", []).append(dict(res))
                if not res["ok"]:
                    self.fail("%s: latency: %s" % (self.label(mode), res["error"]))
                else:
                    log("latency #%d %-14s p50 %.0f us  p99 %.0f us  p99.9 %.0f us" % (
                        rep + 1, self.label(mode), res["p50_us"], res["p99_us"], res["p999_us"]))

    def run_setup(self, results):
        for rep in range(self.args.repeats):
            for mode in self.order(rep):
                r = self.relay(mode, "echo")
                edge = self.edges["echo"]
                pid = r.proc.pid if r.proc else None
                # CPU per connection: a figure the other processes on two cores do not move as
                # much as they move the wall-clock one (socat: its tree, the reaped forks included).
                tunnel = mode in ("ours", "other")
                cpu_client0 = procs.cpu_seconds(pid, tree=True) if pid else None
                cpu_edge0 = procs.cpu_seconds(edge.proc.pid) if tunnel else None
                res = loads.setup(r.addr, self.args.setups, gap=self.args.setup_gap_ms / 1000,
                                  timeout=(30 + self.args.setups * (0.1 + self.args.setup_gap_ms / 1000)) * self.args.slow)
                if res["ok"]:
                    if pid:
                        res["cpu_client_ms_per_conn"] = (procs.cpu_seconds(pid, tree=True) - cpu_client0) * 1000 / self.args.setups
                    if tunnel:
                        res["cpu_edge_ms_per_conn"] = (procs.cpu_seconds(edge.proc.pid) - cpu_edge0) * 1000 / self.args.setups
                results.setdefault(mode, {}).setdefault("setup", []).append(dict(res))
                if not res["ok"]:
                    self.fail("%s: setup: %s" % (self.label(mode), res["error"]))
                else:
                    log("setup #%d %-14s p50 %.2f ms  p99 %.2f ms  client CPU %s ms/connection" % (
                        rep + 1, self.label(mode), res["p50_ms"], res["p99_ms"], _fmt(res.get("cpu_client_ms_per_conn"))))

    def run_concurrency(self, results, fd_budget):
        for n in self.args.conc_sizes:
            if 2 * n > fd_budget:
                self.fail("concurrency %d skipped: the open-file hard limit allows about %d descriptors, the edge "
                          "needs %d (raise it: ulimit -Hn, limits.conf or systemd LimitNOFILE)"
                          % (n, fd_budget, 2 * n))
                continue
            for rep in range(self.args.repeats):
                for batch in self._batches(self.order(rep), n, fd_budget):
                    self._concurrency_batch(results, n, rep, batch)

    def _batches(self, modes, n, budget):
        """Groups modes whose connections can be open at the same time within the fd limits
        (ours, the echo target and the echo edge all have `budget` descriptors)."""
        batches, cur, bench_fds, edge_fds = [], [], 0, 0
        for m in modes:
            b = n
            e = 2 * n if m in TUNNEL_MODES else 0
            if cur and (bench_fds + b > budget or edge_fds + e > budget):
                batches.append(cur)
                cur, bench_fds, edge_fds = [], 0, 0
            cur.append(m)
            bench_fds += b
            edge_fds += e
        if cur:
            batches.append(cur)
        return batches

    def _concurrency_batch(self, results, n, rep, batch):
        live = []
        try:
            for mode in batch:
                relay = self.start_relay(mode, "echo")   # fresh process: idle memory before any connection
                pid = relay.proc.pid if relay.proc else None
                entry = {"n": n, "ok": True, "error": None}
                if pid:
                    entry["rss_idle_kb"], entry["memory_kind"] = procs.memory_kb(pid)
                    if entry["memory_kind"] == "rss":
                        entry["rss_idle_parts_kb"] = procs.rss_parts_kb(pid)
                        entry["rss_idle_anon_kb"] = entry["rss_idle_parts_kb"].get("RssAnon")
                    entry["fds_idle"] = procs.fd_count(pid, tree=True)
                    entry["nofile_limit"] = procs.nofile_limit(pid)
                cset = loads.ConcurrentSet(relay.addr, n)
                entry["open_seconds"] = cset.open(timeout=(20 + n * 0.02) * self.args.slow)
                entry["worked"] = len(cset.socks)
                time.sleep(0.5)
                if pid:
                    entry["rss_open_kb"] = procs.memory_kb(pid)[0]
                    entry["fds_open"] = procs.fd_count(pid, tree=True)
                log("concurrency %d #%d %-14s %d/%d worked in %.1f s%s" % (
                    n, rep + 1, self.label(mode), entry["worked"], n, entry["open_seconds"],
                    "" if not pid else "; RSS %d -> %d kB, fds %d -> %d" % (
                        entry["rss_idle_kb"], entry["rss_open_kb"], entry["fds_idle"], entry["fds_open"])))
                live.append((mode, relay, cset, entry, time.monotonic()))
            log("concurrency %d #%d: idle %.0f s (%s)" % (n, rep + 1, self.args.idle,
                                                          ", ".join(self.label(m) for m in batch)))
            time.sleep(self.args.idle)
            for mode, relay, cset, entry, opened in live:
                pid = relay.proc.pid if relay.proc else None
                entry["idle_seconds"] = time.monotonic() - opened
                if pid:
                    if not relay.proc.alive():
                        entry["ok"] = False
                        entry["error"] = "process exited during the idle time"
                    else:
                        entry["rss_after_idle_kb"] = procs.memory_kb(pid)[0]
                        if entry["memory_kind"] == "rss":
                            entry["rss_after_idle_parts_kb"] = procs.rss_parts_kb(pid)
                        entry["fds_after_idle"] = procs.fd_count(pid, tree=True)
                        entry["rss_per_conn_kb"] = ((entry["rss_after_idle_kb"] - entry["rss_idle_kb"])
                                                    / max(1, entry["worked"]))
                        entry["fds_per_conn"] = (entry["fds_open"] - entry["fds_idle"]) / max(1, entry["worked"])
                entry["worked_after_idle"] = cset.recheck(timeout=(20 + n * 0.01) * self.args.slow)
                entry["failed_reasons"] = cset.errors
                entry["corrupt"] = cset.corrupt
                cset.close()
                if cset.corrupt:
                    entry["ok"] = False
                    entry["error"] = "%d wrong echoes" % cset.corrupt
                    self.fail("%s: concurrency %d: %d connections echoed wrong bytes"
                              % (self.label(mode), n, cset.corrupt))
                if entry["error"] and entry["ok"] is False and not cset.corrupt:
                    self.fail("%s: concurrency %d: %s" % (self.label(mode), n, entry["error"]))
                if self.args.quick and entry["worked_after_idle"] != n:
                    self.fail("%s: concurrency %d: only %d worked after idle (%s)"
                              % (self.label(mode), n, entry["worked_after_idle"], cset.errors))
                log("concurrency %d #%d %-14s %d/%d still worked after %.0f s idle%s%s" % (
                    n, rep + 1, self.label(mode), entry["worked_after_idle"], n, entry["idle_seconds"],
                    "" if "rss_per_conn_kb" not in entry else "; %.1f kB and %.2f fds per connection" % (
                        entry["rss_per_conn_kb"], entry["fds_per_conn"]),
                    "" if not cset.errors else "; failures: %s" % cset.errors))
                results.setdefault(mode, {}).setdefault("concurrency_%d" % n, []).append(entry)
        finally:
            for mode, relay, cset, entry, opened in live:
                cset.close()
            for mode, relay, cset, entry, opened in live:
                self.stop_relay(relay)


def _fmt(v, digits=2):
    return "-" if v is None else ("%.*f" % (digits, v))


# ---------------------------------------------------------------------------------------------

def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    command = "scripts/bench " + " ".join(shlex.quote(a) for a in sys.argv[1:])

    original_soft, soft = raise_nofile()
    log("open-file limit: soft %d -> %d (hard); clients start with the original soft limit %d"
        % (original_soft, soft, original_soft))
    need = max(args.conc_sizes or [0]) * 2 + 300
    if "concurrency" in args.sections and soft < need:
        log("WARNING: the open-file hard limit (%d) is too low for %d concurrent connections (about %d "
            "needed); larger sizes will be skipped and reported as failures"
            % (soft, max(args.conc_sizes), need))

    def on_signal(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    def on_alarm(signum, frame):
        raise BenchError("time limit of %.0f s reached; stopping" % args.time_limit)
    signal.signal(signal.SIGALRM, on_alarm)

    bin_dir = build(args, root)
    with open("/proc/loadavg") as f:
        loadavg_start = " ".join(f.read().split()[:3])
    signal.alarm(int(args.time_limit))
    t_start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="cf-access-bench-")
    bench = Bench(args, bin_dir, workdir, original_soft)
    atexit.register(bench.procs.stop_all)
    results = {}
    try:
        bench.start_infrastructure()
        for mode in args.modes:
            if mode != "direct":
                r = bench.relay(mode, "echo")
                results.setdefault(mode, {})["rss_start_kb"] = r.rss_start_kb
                results[mode]["nofile_limit"] = procs.nofile_limit(r.proc.pid)
        if "integrity" in args.sections:
            bench.run_integrity(results)
        if "bulk" in args.sections:
            bench.run_bulk(results)
        if "latency" in args.sections:
            bench.run_latency(results)
        if "setup" in args.sections:
            bench.run_setup(results)
        if "parallel" in args.sections:
            bench.run_parallel(results)
        if "concurrency" in args.sections:
            # Other relays hold nothing open now; keep a margin for their own descriptors.
            bench.run_concurrency(results, fd_budget=soft - 300)
        if "ssh" in args.sections:
            for relay in list(bench.relays.values()):
                bench.stop_relay(relay)   # nothing else runs while SSH is measured
            bench.relays.clear()
            sshbench.run(bench, results, HOSTNAME, TOKEN_ID, TOKEN_SECRET, log, bench.fail)
        if "stdio" in args.sections:
            for relay in list(bench.relays.values()):
                bench.stop_relay(relay)   # nothing else runs while stdio mode is measured
            bench.relays.clear()
            stdiobench.run(bench, results, HOSTNAME, TOKEN_ID, TOKEN_SECRET, log, bench.fail)
        if "floor" in args.sections:
            for relay in list(bench.relays.values()):
                bench.stop_relay(relay)   # the probe runs alone
            bench.relays.clear()
            floorbench.run(bench, results, log, bench.fail)
    except KeyboardInterrupt:
        log("interrupted; stopping every process started")
        bench.procs.stop_all()
        _cleanup(workdir, args)
        return 130
    except BenchError as e:
        log("error: %s" % e)
        bench.procs.stop_all()
        args.keep_workdir = True
        log("logs kept in %s" % workdir)
        return 1
    finally:
        signal.alarm(0)
        for edge in bench.edges.values():
            edge.close()
        bench.procs.stop_all()
    elapsed = time.monotonic() - t_start

    machine = machine_description()
    machine["loadavg_start"] = loadavg_start
    summary = report.summarize(results, args)
    text = report.markdown(summary, args, bench, machine, command, elapsed)
    ssh_summary = None
    if "ssh" in args.sections:
        ssh_summary = sshbench.summarize(results, args)
        text += "\n".join(sshbench.markdown(ssh_summary, args, report.cell)) + "\n"
    stdio_summary = None
    if "stdio" in args.sections:
        stdio_summary = stdiobench.summarize(results, args)
        text += "\n".join(stdiobench.markdown(stdio_summary, args, report.cell)) + "\n"
    floor_summary = None
    if "floor" in args.sections:
        floor_summary = floorbench.summarize(results, report)
        text += "\n".join(floorbench.markdown(floor_summary, summary, args, report.cell,
                                              report.TARGET_CPU_OVER_SOCAT)) + "\n"
    sys.stdout.write(text)
    sys.stdout.flush()
    missing = report.missing_numbers(summary, args)
    if ssh_summary is not None:
        missing += sshbench.missing_numbers(ssh_summary, args)
    if stdio_summary is not None:
        missing += stdiobench.missing_numbers(stdio_summary, args)
    if floor_summary is not None:
        missing += floorbench.missing_numbers(floor_summary)
    for m in missing:
        bench.fail("no number: %s" % m)
    if args.json:
        doc = {
            "command": command,
            "machine": machine,
            "elapsed_seconds": elapsed,
            "config": {k: getattr(args, k) for k in ("quick", "repeats", "bulk_mib", "rounds", "warmup", "setups", "setup_gap_ms",
                                                     "conc_sizes", "idle", "integrity_mib", "parallel", "parallel_mib", "sections", "modes", "ssh_mib", "ssh_modes",
                                                     "client_cmd", "client_stdio_cmd", "client_name")},
            "labels": {m: bench.label(m) for m in args.modes},
            "summary": summary,
            "ssh_summary": ssh_summary,
            "stdio_summary": stdio_summary,
            "floor_summary": floor_summary,
            "floor_least": None if floor_summary is None else floorbench.least(floor_summary, summary,
                                                                               report.TARGET_CPU_OVER_SOCAT),
            "targets": report.targets(summary, args),
            "raw": results,
            "failures": bench.failures,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
        log("JSON written to %s" % args.json)
    if bench.failures:
        log("%d check(s) failed:" % len(bench.failures))
        for f in bench.failures:
            log("  - %s" % f.splitlines()[0])
        log("logs kept in %s" % workdir)
        return 1
    _cleanup(workdir, args)
    log("done in %.0f s" % elapsed)
    return 0


def _cleanup(workdir, args):
    if args.keep_workdir:
        log("workdir kept: %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
