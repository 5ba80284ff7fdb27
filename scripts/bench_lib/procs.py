"""Starting, watching and stopping the processes of a benchmark run, and /proc figures.

Every process is started in its own session (so its whole process group, e.g. socat's forked
children or a shell's pipeline, can be ended by that group's id) and remembered until it is
stopped. `Processes.stop_all()` runs from a `finally`, from atexit and on SIGINT/SIGTERM.
"""

import os
import re
import resource
import signal
import socket
import subprocess
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
LOOPBACK = "127.0.0.1"


class BenchError(Exception):
    """A failure that ends the run with a plain message."""


class Proc:
    """One started process (the leader of its own process group) and its log file."""

    def __init__(self, name, popen, log_path):
        self.name = name
        self.popen = popen
        self.pid = popen.pid
        self.log_path = log_path
        self.grace = 5.0

    def alive(self):
        return self.popen.poll() is None

    def log_tail(self, lines=15):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class Processes:
    """Owns every process the run starts."""

    def __init__(self, workdir, child_nofile=None):
        self.workdir = workdir
        self.procs = []
        self.child_nofile = child_nofile
        self._counter = 0

    def start(self, name, argv, env=None, shell=False, nofile=None):
        """Starts `argv` (a list, or a shell command line when `shell`), stdout+stderr to a log."""
        self._counter += 1
        log_path = os.path.join(self.workdir, "%02d-%s.log" % (self._counter, name))
        log = open(log_path, "wb")
        limit = nofile

        def prepare():
            if limit is not None:
                _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
            # The run's signal dispositions must not leak into children.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

        cmd = ["/bin/sh", "-c", argv] if shell else argv
        try:
            popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True, preexec_fn=prepare, close_fds=True)
        except OSError as e:
            log.close()
            raise BenchError("cannot start %s (%s): %s" % (name, cmd[0], e))
        log.close()
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def wait_for_line(self, proc, marker, timeout=30.0):
        """Waits until the process's log has a line containing `marker`; returns that line."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(proc.log_path, "r", errors="replace") as f:
                    for line in f:
                        if marker in line:
                            return line.strip()
            except OSError:
                pass
            if not proc.alive():
                raise BenchError("%s exited (status %s) before printing '%s':\n%s"
                                 % (proc.name, proc.popen.returncode, marker, proc.log_tail()))
            if time.monotonic() > deadline:
                raise BenchError("%s did not print '%s' within %.0f s:\n%s"
                                 % (proc.name, marker, timeout, proc.log_tail()))
            time.sleep(0.02)

    def stop(self, proc, grace=None):
        """SIGTERM to the process group, SIGKILL after `grace` seconds; reaps the leader."""
        if proc not in self.procs:
            return
        grace = max(grace or 0, proc.grace)
        self.procs.remove(proc)
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            try:
                proc.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # Children that outlived the leader (socat's forks, a shell's pipeline).
        if _group_alive(proc.pid):
            _signal_group(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            _signal_group(proc.pid, signal.SIGKILL)

    def stop_all(self):
        for proc in list(reversed(self.procs)):
            try:
                self.stop(proc, grace=3.0)
            except Exception:  # noqa: BLE001 - cleanup goes on whatever happens
                pass


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


# ---------------------------------------------------------------------------------------------
# /proc figures

def _read(path):
    with open(path, "rb") as f:
        return f.read().decode("ascii", "replace")


def _stat_fields(pid):
    """Fields of /proc/<pid>/stat after the command name (index 0 = state)."""
    text = _read("/proc/%d/stat" % pid)
    return text[text.rindex(")") + 2:].split()


def process_tree(root):
    """The pids of `root` and all its descendants that are alive now."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry))[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def cpu_seconds(pid, tree=False):
    """user+system CPU seconds of `pid` (with `tree`: plus live descendants and reaped children)."""
    pids = process_tree(pid) if tree else [pid]
    total = 0
    for p in pids:
        try:
            f = _stat_fields(p)
        except OSError:
            continue
        # utime, stime, cutime, cstime are fields 14-17 of stat = index 11-14 here.
        total += int(f[11]) + int(f[12])
        if p == pid and tree:
            total += int(f[13]) + int(f[14])
    return total / CLK_TCK


def rss_kb(pid):
    for line in _read("/proc/%d/status" % pid).splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def rss_parts_kb(pid):
    """VmRSS split into RssAnon (heap, stacks), RssFile (mapped binaries/libraries) and RssShmem."""
    parts = {}
    for line in _read("/proc/%d/status" % pid).splitlines():
        for key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            if line.startswith(key + ":"):
                parts[key] = int(line.split()[1])
    return parts


def pss_kb(pid):
    try:
        for line in _read("/proc/%d/smaps_rollup" % pid).splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_kb(pid):
    """(kB, how): VmRSS for a single process; for a process tree the sum of Pss (shared pages
    split between the processes that map them, so forked children are not counted many times)."""
    pids = process_tree(pid)
    if len(pids) == 1:
        return rss_kb(pid), "rss"
    return sum(pss_kb(p) for p in pids), "pss-sum(%d procs)" % len(pids)


def fd_count(pid, tree=False):
    pids = process_tree(pid) if tree else [pid]
    total = 0
    for p in pids:
        try:
            total += len(os.listdir("/proc/%d/fd" % p))
        except OSError:
            pass
    return total


def nofile_limit(pid):
    """(soft, hard) 'Max open files' of a process, from /proc/<pid>/limits."""
    for line in _read("/proc/%d/limits" % pid).splitlines():
        if line.startswith("Max open files"):
            parts = line.split()
            return parts[3], parts[4]
    return None, None


# ---------------------------------------------------------------------------------------------
# loopback ports

def free_port():
    """A port that was free on 127.0.0.1 a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def is_listening(port):
    """True when some socket listens on 127.0.0.1:port (read from /proc/net/tcp, no connection)."""
    want = "0100007F:%04X" % port
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[1] == want and parts[3] == "0A":
                    return True
    except OSError:
        pass
    return False


def wait_listening(proc, port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not is_listening(port):
        if not proc.alive():
            raise BenchError("%s exited (status %s) before listening on %s:%d:\n%s"
                             % (proc.name, proc.popen.returncode, LOOPBACK, port, proc.log_tail()))
        if time.monotonic() > deadline:
            raise BenchError("%s is not listening on %s:%d after %.0f s:\n%s"
                             % (proc.name, LOOPBACK, port, timeout, proc.log_tail()))
        time.sleep(0.02)


def exec_form(cmd):
    """A simple command line (no shell operators) is run with `exec`, so the client itself, not a
    shell around it, is the process measured; leading VAR=value assignments stay in front."""
    if re.search(r"[;|&`\n<>()]|\$\(", cmd):
        return cmd
    m = re.match(r"^((?:\s*[A-Za-z_][A-Za-z0-9_]*=\S*)*)\s*(.*)$", cmd, re.S)
    assigns, rest = m.group(1).strip(), m.group(2)
    return ("%s exec %s" % (assigns, rest)).strip()
