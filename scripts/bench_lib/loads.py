"""The loads: bulk upload/download, echo integrity, ping-pong latency, connection setup and
many concurrent idle connections. Every load is bounded in bytes/count and in time.

Data pattern: byte[i] = i % 251, the pattern the emulator's `source` target sends, so a download
is checked byte for byte and an upload sends the same stream.
"""

import errno
import selectors
import socket
import threading
import time

PERIOD = 251
CHUNK = PERIOD * 1024          # 257,024 bytes: a multiple of the period, so chunks continue it
RECV = 256 * 1024
_PATTERN = bytes(i % PERIOD for i in range(PERIOD * 1100))   # >= PERIOD + RECV bytes
_EXPECTED = {}                 # offset % PERIOD -> RECV bytes of the pattern from there


def _expected(phase):
    block = _EXPECTED.get(phase)
    if block is None:
        block = _EXPECTED[phase] = _PATTERN[phase:phase + RECV]
    return block


def pattern_chunk():
    return memoryview(_PATTERN)[:CHUNK]


def _connect(addr, timeout):
    s = socket.create_connection(addr, timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class LoadResult(dict):
    """A dict with `ok` (bool), `error` (str or None) and the load's figures."""

    def __init__(self, **kw):
        super().__init__(ok=True, error=None)
        self.update(kw)

    def fail(self, message):
        self["ok"] = False
        if not self["error"]:
            self["error"] = message
        return self


def bulk_upload(addr, nbytes, timeout, delivered=None):
    """Sends `nbytes` of the pattern, half-closes, then waits until they are delivered.

    `delivered(deadline)` (when given) blocks until the far end has the bytes (e.g. the edge's
    counters); without it, the far end closing (the sink after our EOF) marks delivery.
    Returns seconds from connect() to delivery.
    """
    res = LoadResult(bytes=nbytes)
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    try:
        s = _connect(addr, 10)
    except OSError as e:
        return res.fail("connect: %s" % e)
    sent = 0
    try:
        s.settimeout(10)
        chunk = pattern_chunk()
        while sent < nbytes:
            if time.monotonic() > deadline:
                return res.fail("timed out after %d of %d bytes sent" % (sent, nbytes))
            n = min(CHUNK, nbytes - sent)
            s.sendall(chunk[:n])
            sent += n
        s.shutdown(socket.SHUT_WR)
        if delivered is None:
            # The sink closes once it has read our EOF, i.e. every byte.
            while True:
                if time.monotonic() > deadline:
                    return res.fail("timed out waiting for the sink to close")
                try:
                    if not s.recv(65536):
                        break
                except ConnectionResetError:
                    break
        else:
            # A tunnel client may close our socket before its queued bytes reach the edge (or keep
            # it open after our EOF): the edge's own byte counter says when all have arrived.
            err = delivered(deadline)
            if err:
                return res.fail(err)
        res["seconds"] = time.perf_counter() - t0
        return res
    except OSError as e:
        return res.fail("%s after %d bytes sent" % (e, sent))
    finally:
        s.close()


def bulk_download(addr, nbytes, timeout):
    """Reads until EOF from a `source` path and checks every byte against the pattern."""
    res = LoadResult(bytes=nbytes)
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    try:
        s = _connect(addr, 10)
    except OSError as e:
        return res.fail("connect: %s" % e)
    try:
        s.settimeout(10)
        buf = bytearray(RECV)
        mv = memoryview(buf)
        got = 0
        while True:
            if time.monotonic() > deadline:
                return res.fail("timed out after %d of %d bytes" % (got, nbytes))
            n = s.recv_into(buf, RECV, socket.MSG_WAITALL)
            if n == 0:
                break
            if got + n > nbytes:
                return res.fail("received more than %d bytes" % nbytes)
            exp = _expected(got % PERIOD)
            if not (exp == buf if n == RECV else exp.startswith(mv[:n])):
                return res.fail("corrupt data in bytes %d-%d" % (got, got + n))
            got += n
        res["seconds"] = time.perf_counter() - t0
        if got != nbytes:
            return res.fail("received %d of %d bytes before EOF" % (got, nbytes))
        return res
    except OSError as e:
        return res.fail("%s" % e)
    finally:
        s.close()


def echo_integrity(addr, nbytes, timeout):
    """Sends `nbytes` of the pattern through an echo path while reading it back; compares all."""
    res = LoadResult(bytes=nbytes)
    deadline = time.monotonic() + timeout
    try:
        s = _connect(addr, 10)
    except OSError as e:
        return res.fail("connect: %s" % e)
    s.settimeout(10)
    send_error = []

    def sender():
        chunk = pattern_chunk()
        sent = 0
        try:
            while sent < nbytes and time.monotonic() < deadline:
                n = min(CHUNK, nbytes - sent)
                s.sendall(chunk[:n])
                sent += n
        except OSError as e:
            send_error.append("send: %s" % e)

    t0 = time.perf_counter()
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    try:
        buf = bytearray(RECV)
        mv = memoryview(buf)
        got = 0
        while got < nbytes:
            if time.monotonic() > deadline:
                return res.fail("timed out after %d of %d bytes echoed" % (got, nbytes))
            n = s.recv_into(buf, min(RECV, nbytes - got))
            if n == 0:
                return res.fail("EOF after %d of %d bytes echoed" % (got, nbytes))
            if not _expected(got % PERIOD).startswith(mv[:n]):
                return res.fail("corrupt echo in bytes %d-%d" % (got, got + n))
            got += n
        res["seconds"] = time.perf_counter() - t0
        res["mib_per_s"] = nbytes / (1 << 20) / res["seconds"]
    except OSError as e:
        return res.fail("recv: %s" % e)
    finally:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        thread.join(timeout=5)
        s.close()
    if send_error:
        return res.fail(send_error[0])
    return res


def percentile(sorted_values, p):
    """Nearest-rank percentile (p in 0..100) of an ascending list."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, int(-(-p * len(sorted_values) // 100)) - 1))
    return sorted_values[k]


def latency(addr, rounds, warmup, timeout):
    """64-byte ping-pong on one connection: µs per round trip (p50/p99/p99.9), echo checked."""
    res = LoadResult(rounds=rounds)
    deadline = time.monotonic() + timeout
    try:
        s = _connect(addr, 10)
    except OSError as e:
        return res.fail("connect: %s" % e)
    try:
        s.settimeout(10)
        samples = []
        clock = time.perf_counter_ns
        for i in range(warmup + rounds):
            if (i & 255) == 0 and time.monotonic() > deadline:
                return res.fail("timed out after %d round trips" % i)
            msg = (b"%08d" % i) * 8
            t0 = clock()
            s.sendall(msg)
            data = s.recv(64)
            while len(data) < 64:
                more = s.recv(64 - len(data))
                if not more:
                    return res.fail("EOF after %d round trips" % i)
                data += more
            t1 = clock()
            if data != msg:
                return res.fail("corrupt echo in round trip %d" % i)
            if i >= warmup:
                samples.append((t1 - t0) / 1000.0)
        samples.sort()
        res.update(p50_us=percentile(samples, 50), p99_us=percentile(samples, 99),
                   p999_us=percentile(samples, 99.9), mean_us=sum(samples) / len(samples))
        return res
    except OSError as e:
        return res.fail("%s" % e)
    finally:
        s.close()


def setup(addr, count, timeout, gap=0.0):
    """`count` sequential new connections: connect() to the first echoed byte, ms p50/p99; `gap`
    seconds of pause after each connection is closed (0: back to back)."""
    res = LoadResult(count=count)
    deadline = time.monotonic() + timeout
    samples = []
    clock = time.perf_counter_ns
    for i in range(count):
        if time.monotonic() > deadline:
            return res.fail("timed out after %d connections" % i)
        byte = bytes([33 + i % 90])
        t0 = clock()
        try:
            s = socket.create_connection(addr, timeout=10)
        except OSError as e:
            return res.fail("connect %d: %s" % (i, e))
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(byte)
            data = s.recv(1)
            t1 = clock()
        except OSError as e:
            return res.fail("connection %d: %s" % (i, e))
        finally:
            s.close()
        if data != byte:
            return res.fail("connection %d: %s" % (i, "EOF" if not data else "wrong echo"))
        samples.append((t1 - t0) / 1e6)
        if gap > 0:
            time.sleep(gap)
    samples.sort()
    res.update(p50_ms=percentile(samples, 50), p99_ms=percentile(samples, 99),
               mean_ms=sum(samples) / len(samples))
    return res


# ---------------------------------------------------------------------------------------------
# Many concurrent connections (non-blocking sockets and one selector, no threads).

MSG_LEN = 16


def _message(round_no, index):
    return b"r%d-%012d\n" % (round_no, index)


class ConcurrentSet:
    """`n` connections to one address, each checked with one 16-byte echo, then held open."""

    def __init__(self, addr, n):
        self.addr = addr
        self.n = n
        self.socks = {}           # index -> open socket that has echoed correctly
        self.failed = 0
        self.corrupt = 0
        self.errors = {}

    def _note(self, what):
        self.errors[what] = self.errors.get(what, 0) + 1

    def open(self, timeout, in_flight=256):
        """Opens all connections (at most `in_flight` not yet echoed at a time). Returns seconds."""
        sel = selectors.DefaultSelector()
        t0 = time.monotonic()
        deadline = t0 + timeout
        next_index = 0
        active = 0
        try:
            while (next_index < self.n or active) and time.monotonic() < deadline:
                while next_index < self.n and active < in_flight:
                    i = next_index
                    next_index += 1
                    try:
                        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    except OSError as e:
                        self.failed += 1
                        self._note("socket: %s" % e.strerror)
                        continue
                    s.setblocking(False)
                    err = s.connect_ex(self.addr)
                    if err not in (0, errno.EINPROGRESS):
                        s.close()
                        self.failed += 1
                        self._note("connect: %s" % errno.errorcode.get(err, err))
                        continue
                    sel.register(s, selectors.EVENT_WRITE, [i, s, b""])
                    active += 1
                for key, _ in sel.select(timeout=0.2):
                    st = key.data
                    i, s = st[0], st[1]
                    done = self._step(sel, key, st, 0)
                    if done is not None:
                        active -= 1
                        sel.unregister(s)
                        if done:
                            self.socks[i] = s
                        else:
                            s.close()
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
                key.fileobj.close()
                self.failed += 1
                self._note("timed out")
            self.failed += self.n - next_index
            if self.n - next_index:
                self._note("not attempted (time out)")
        finally:
            sel.close()
        return time.monotonic() - t0

    def _step(self, sel, key, st, round_no):
        """Advances one connection; returns True (echo good), False (failed) or None (pending)."""
        i, s = st[0], st[1]
        try:
            if key.events & selectors.EVENT_WRITE:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self.failed += 1
                    self._note("connect: %s" % errno.errorcode.get(err, err))
                    return False
                s.send(_message(round_no, i))
                sel.modify(s, selectors.EVENT_READ, st)
                return None
            data = s.recv(64)
        except OSError as e:
            self.failed += 1
            self._note("%s" % (errno.errorcode.get(e.errno, e.errno),))
            return False
        if not data:
            self.failed += 1
            self._note("closed by peer")
            return False
        st[2] += data
        if len(st[2]) < MSG_LEN:
            return None
        if st[2] != _message(round_no, i):
            self.corrupt += 1
            self.failed += 1
            self._note("wrong echo")
            return False
        return True

    def recheck(self, timeout, round_no=1):
        """Sends one more message on every open connection; returns how many echoed it correctly."""
        sel = selectors.DefaultSelector()
        deadline = time.monotonic() + timeout
        ok = 0
        before_failed = self.failed
        try:
            for i, s in list(self.socks.items()):
                st = [i, s, b""]
                try:
                    s.send(_message(round_no, i))
                except OSError as e:
                    self.failed += 1
                    self._note("after idle: %s" % errno.errorcode.get(e.errno, e.errno))
                    del self.socks[i]
                    s.close()
                    continue
                sel.register(s, selectors.EVENT_READ, st)
            while sel.get_map() and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=0.2):
                    st = key.data
                    done = self._step(sel, key, st, round_no)
                    if done is not None:
                        sel.unregister(st[1])
                        if done:
                            ok += 1
                        else:
                            del self.socks[st[0]]
                            st[1].close()
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
                del self.socks[key.data[0]]
                key.fileobj.close()
                self.failed += 1
                self._note("after idle: timed out")
        finally:
            sel.close()
        self.failed_after_idle = self.failed - before_failed
        return ok

    def close(self):
        for s in self.socks.values():
            s.close()
        self.socks = {}
