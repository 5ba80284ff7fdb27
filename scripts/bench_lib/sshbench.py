"""The `ssh` section (issue 16 point 17): 1 GiB through an SSH session, `cf-access-tcp shell`
side by side with OpenSSH's `ssh -o ProxyCommand='cf-access-tcp --hostname %h …'` and with plain
`ssh` straight to the same sshd (no tunnel, the ceiling).

A real OpenSSH sshd on 127.0.0.1 (its own host key, one authorized client key, the user running
the bench: root logs in with the key only) behind one more edge emulator. Each transfer runs the
client under a small reaper (a child subreaper that waits for every descendant), so the CPU
figure is the whole client: the tool alone, or ssh plus its ProxyCommand.

  download   `head -c N /dev/zero` remotely; the bench reads stdout, checks every byte is zero
  upload     the bench writes N zero bytes to stdin of `wc -c` remotely and checks the count

MiB/s counts from the first byte to the last (download) or from the first write to the count
arriving (upload), so connecting and logging in are left out; CPU s/GiB includes them. The
longest pause is the longest time between two arriving chunks (download) or two accepted writes
(upload) — the stall detector of issue 16 point 6 in numbers.
"""

import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import report
from .procs import LOOPBACK, BenchError

MIB = 1 << 20
GIB = 1 << 30
CHUNK = MIB
MODES = ("shell", "ssh-proxy", "ssh")
# By hand (--ssh-modes): the same download with a pseudo-terminal (-tt), where `shell` runs on
# libssh2 while libssh is older than 0.11. Download only: a terminal's line discipline is no
# channel for bulk input.
TERMINAL_MODES = ("shell-tty", "ssh-proxy-tty")
ALL_MODES = MODES + TERMINAL_MODES
MODE_LABELS = {"shell": "cf-access-tcp shell", "ssh-proxy": "ssh + ProxyCommand", "ssh": "plain ssh (no tunnel)",
               "shell-tty": "cf-access-tcp shell -tt", "ssh-proxy-tty": "ssh -tt + ProxyCommand"}


def directions(mode):
    """The directions measured for `mode`."""
    return ("download",) if mode in TERMINAL_MODES else ("download", "upload")

# Runs argv as a child subreaper: every descendant (ssh's ProxyCommand too) is waited for, and
# the summed CPU of all of them is written as JSON to the report file.
REAPER = r"""
import ctypes, json, os, resource, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
status = None
while True:
    try:
        p, st = os.wait()
    except ChildProcessError:
        break
    if p == pid:
        status = os.waitstatus_to_exitcode(st)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(report, "w") as f:
    json.dump({"status": status, "cpu": ru.ru_utime + ru.ru_stime}, f)
"""


class SSHWorld:
    """sshd on loopback with fresh keys, an edge emulator in front of it, and the files the
    clients need (known_hosts under the Access hostname, a private key, an empty HOME)."""

    def __init__(self, bench, hostname, token_id, token_secret):
        self.bench = bench
        self.hostname = hostname
        self.token_env = {"TUNNEL_SERVICE_TOKEN_ID": token_id, "TUNNEL_SERVICE_TOKEN_SECRET": token_secret}
        sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None)
        ssh = shutil.which("ssh")
        keygen = shutil.which("ssh-keygen")
        if not (sshd and ssh and keygen):
            raise BenchError("the ssh section needs sshd, ssh and ssh-keygen (packages openssh-server, "
                             "openssh-client; scripts/setup installs them)")
        self.ssh = ssh
        if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
            raise BenchError("sshd's privilege separation directory /run/sshd is missing (scripts/setup)")
        self.dir = tempfile.mkdtemp(prefix="ssh-", dir=bench.workdir)
        os.chmod(self.dir, 0o755)
        self.user = getpass.getuser()
        host_key = os.path.join(self.dir, "host_ed25519")
        self.client_key = os.path.join(self.dir, "client_ed25519")
        for path in (host_key, self.client_key):
            out = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "cfat-bench", "-f", path],
                                 capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                raise BenchError("ssh-keygen failed: %s" % out.stderr)
        authorized = os.path.join(self.dir, "authorized_keys")
        shutil.copyfile(self.client_key + ".pub", authorized)
        os.chmod(authorized, 0o644)
        with open(host_key + ".pub") as f:
            host_line = " ".join(f.read().split()[:2])
        self.known_hosts = os.path.join(self.dir, "known_hosts")
        with open(self.known_hosts, "w") as f:
            f.write("%s %s\n" % (hostname, host_line))
        self.home = os.path.join(self.dir, "home")
        os.makedirs(os.path.join(self.home, ".ssh"))
        self.port = None
        for _ in range(5):
            port = _free_port()
            config = os.path.join(self.dir, "sshd_config")
            with open(config, "w") as f:
                f.write("\n".join([
                    "ListenAddress %s" % LOOPBACK, "Port %d" % port, "HostKey %s" % host_key,
                    "PidFile %s" % os.path.join(self.dir, "sshd.pid"),
                    "AuthorizedKeysFile %s" % authorized, "StrictModes no", "UsePAM no",
                    "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password", "AllowUsers %s" % self.user,
                    "UseDNS no", "PrintMotd no", "PrintLastLog no", "X11Forwarding no", "LogLevel ERROR",
                    "MaxStartups 64:30:128", ""]))
            proc = bench.procs.start("sshd", [sshd, "-D", "-e", "-f", config])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and proc.alive() and not _listening(port):
                time.sleep(0.05)
            if proc.alive() and _listening(port):
                self.port, self.sshd = port, proc
                break
            bench.procs.stop(proc)
        if self.port is None:
            raise BenchError("sshd did not start:\n%s" % proc.log_tail())
        self.edge = bench.start_edge("ssh", "%s:%d" % (LOOPBACK, self.port))

    def environment(self):
        env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS")}
        env.update(self.token_env)
        env["HOME"] = self.home
        return env

    def argv(self, mode, command):
        tool = self.bench.client_bin
        if mode in ("shell", "shell-tty"):
            return [tool, "shell", "%s@%s" % (self.user, self.hostname), "--connect-to", self.edge.addr,
                    "--ca-file", self.bench.ca, "-i", self.client_key, "--known-hosts", self.known_hosts]\
                + (["-tt"] if mode == "shell-tty" else []) + ["--", command]
        options = ["-F", "/dev/null", "-tt" if mode == "ssh-proxy-tty" else "-T", "-l", self.user, "-i", self.client_key,
                   "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
                   "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=%s" % self.known_hosts,
                   "-o", "GlobalKnownHostsFile=/dev/null", "-o", "HostKeyAlias=%s" % self.hostname,
                   "-o", "CheckHostIP=no", "-o", "UpdateHostKeys=no", "-o", "ControlMaster=no",
                   "-o", "ControlPath=none", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=30"]
        if mode in ("ssh-proxy", "ssh-proxy-tty"):
            proxy = "%s --hostname %%h --connect-to %s --ca-file %s" % (tool, self.edge.addr, self.bench.ca)
            return [self.ssh] + options + ["-o", "ProxyCommand=%s" % proxy, self.hostname, command]
        return [self.ssh] + options + ["-p", str(self.port), LOOPBACK, command]

    def transfer(self, mode, direction, nbytes, timeout):
        """One transfer; a dict with ok, error, mib_per_s, cpu_s_per_gib, longest_pause_s."""
        command = "head -c %d /dev/zero" % nbytes if direction == "download" else "wc -c"
        report = os.path.join(self.dir, "report-%s-%s.json" % (mode, direction))
        if os.path.exists(report):
            os.remove(report)
        log_path = os.path.join(self.dir, "stderr-%s-%s.log" % (mode, direction))
        out = {"ok": False, "error": None}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-c", REAPER, report] + self.argv(mode, command),
                                    stdin=subprocess.PIPE if direction == "upload" else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=log, env=self.environment(),
                                    start_new_session=True, bufsize=0)
        deadline = time.monotonic() + timeout
        try:
            if direction == "download":
                got, seconds, pause, error = _read_zeros(proc.stdout, nbytes, deadline)
            else:
                got, seconds, pause, error = _write_zeros(proc.stdin, proc.stdout, nbytes, deadline)
            status = proc.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            error, status = "timed out after %.0f s" % timeout, None
        finally:
            if proc.poll() is None:
                _kill_group(proc.pid)
                proc.wait()
        result = None
        if os.path.exists(report):
            with open(report) as f:
                result = json.load(f)
        if error is None and (result is None or result["status"] != 0):
            error = "exit status %s" % (None if result is None else result["status"])
        if error is not None:
            with open(log_path, "rb") as f:
                tail = f.read()[-600:].decode("utf-8", "replace").strip()
            out["error"] = "%s%s" % (error, "; stderr: " + tail if tail else "")
            return out
        out.update(ok=True, seconds=seconds, mib_per_s=nbytes / MIB / seconds,
                   cpu_s_per_gib=result["cpu"] / (nbytes / GIB), longest_pause_s=pause, bytes=got)
        return out


def _read_zeros(stream, nbytes, deadline):
    """Reads stdout to its end: (bytes, seconds first→last byte, longest pause, error or None)."""
    zeros = memoryview(bytes(CHUNK))
    got, first, last, pause = 0, None, None, 0.0
    fd = stream.fileno()
    while True:
        if time.monotonic() > deadline:
            return got, None, pause, "timed out with %d of %d bytes" % (got, nbytes)
        chunk = os.read(fd, CHUNK)
        now = time.monotonic()
        if not chunk:
            break
        if first is None:
            first = now
        else:
            pause = max(pause, now - last)
        last = now
        if chunk != zeros[:len(chunk)]:
            return got, None, pause, "a byte that is not zero near offset %d" % got
        got += len(chunk)
    if got != nbytes:
        return got, None, pause, "%d of %d bytes arrived" % (got, nbytes)
    return got, max(last - first, 1e-6), pause, None


def _write_zeros(stdin, stdout, nbytes, deadline):
    """Writes `nbytes` zeros, closes stdin, reads `wc -c`'s count: (bytes, seconds, pause, error)."""
    zeros = bytes(CHUNK)
    sent, first, last, pause = 0, None, None, 0.0
    try:
        while sent < nbytes:
            if time.monotonic() > deadline:
                return sent, None, pause, "timed out with %d of %d bytes written" % (sent, nbytes)
            n = os.write(stdin.fileno(), zeros[:min(CHUNK, nbytes - sent)])
            now = time.monotonic()
            if first is None:
                first = now
            else:
                pause = max(pause, now - last)
            last = now
            sent += n
        stdin.close()
    except BrokenPipeError:
        return sent, None, pause, "the client stopped reading after %d bytes" % sent
    answer = stdout.read()
    done = time.monotonic()
    try:
        counted = int(answer.strip() or b"-1")
    except ValueError:
        counted = -1
    if counted != nbytes:
        return sent, None, pause, "the remote counted %r, not %d" % (answer[:80], nbytes)
    return sent, max(done - first, 1e-6), pause, None


def _kill_group(pid):
    try:
        os.killpg(pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


def _free_port():
    import socket
    s = socket.socket()
    try:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _listening(port):
    import socket
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect((LOOPBACK, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def run(bench, results, hostname, token_id, token_secret, log, fail):
    """The section: every mode and direction, alternating, `repeats` times."""
    args = bench.args
    world = SSHWorld(bench, hostname, token_id, token_secret)
    nbytes = args.ssh_mib * MIB
    timeout = (60 + nbytes / (4 * MIB)) * args.slow   # at least 4 MiB/s, else it counts as failed
    modes = args.ssh_modes
    for rep in range(args.repeats):
        k = rep % len(modes)
        for direction in ("download", "upload"):
            for mode in modes[k:] + modes[:k]:
                if direction not in directions(mode):
                    continue
                out = world.transfer(mode, direction, nbytes, timeout)
                results.setdefault("ssh", {}).setdefault(mode, {}).setdefault(direction, []).append(out)
                if out["ok"]:
                    log("ssh %s #%d %-22s %7.1f MiB/s  %5.2f CPU-s/GiB  longest pause %.2f s" % (
                        direction, rep + 1, MODE_LABELS[mode], out["mib_per_s"], out["cpu_s_per_gib"],
                        out["longest_pause_s"]))
                else:
                    fail("ssh: %s %s %d MiB: %s" % (MODE_LABELS[mode], direction, args.ssh_mib, out["error"]))


ROWS = (
    ("download", "mib_per_s", "Download %s, MiB/s", 0),
    ("download", "cpu_s_per_gib", "Download CPU s/GiB, whole client", 2),
    ("download", "longest_pause_s", "Download longest pause, s", 2),
    ("upload", "mib_per_s", "Upload %s, MiB/s", 0),
    ("upload", "cpu_s_per_gib", "Upload CPU s/GiB, whole client", 2),
    ("upload", "longest_pause_s", "Upload longest pause, s", 2),
)


def summarize(results, args):
    return report.section_summary(results.get("ssh", {}), args.ssh_modes, ROWS)


def markdown(summary, args, cell):
    size = "%d MiB" % args.ssh_mib if args.ssh_mib % 1024 else "%d GiB" % (args.ssh_mib // 1024)
    lines = ["SSH through the tunnel (`ssh` section): `cf-access-tcp shell` against OpenSSH with "
             "`ProxyCommand=cf-access-tcp --hostname %h`, and plain ssh to the same sshd:", ""]
    lines += report.section_table(summary, args.ssh_modes, [MODE_LABELS[m] for m in args.ssh_modes], ROWS, size)
    lines.append("")
    lines.append("CPU = user+system seconds of the whole client (the tool; or ssh and its ProxyCommand), "
                 "connecting and logging in included; MiB/s from the first to the last byte.")
    lines.append("")
    return lines


def missing_numbers(summary, args):
    out = []
    for mode in args.ssh_modes:
        for direction, field, label, _ in ROWS:
            if direction in directions(mode) and summary[mode].get("%s_%s" % (direction, field)) is None:
                out.append("ssh %s: %s %s" % (MODE_LABELS[mode], direction, field))
    return out
