#!/usr/bin/env python3
"""A hostile TLS edge that ends the TLS stream in exactly the chosen way, for cf-access-tcp's tests
of how the carrier treats the ends of a TLS stream (issue 28).

Unlike scripts/hostile-edge.py it keeps TLS in memory (ssl.MemoryBIO): every TCP write is a byte
string it built, so a ping and the failure that follows it leave in ONE write, a record can be
replayed, garbage can follow a good record. Two things Python's ssl module cannot do, a TLS 1.3
KeyUpdate and a TLS 1.2 HelloRequest, are asked of the same OpenSSL through ctypes.

It prints `hostile-edge listening on 127.0.0.1:PORT`, then one line per event (`request N`,
`failure-sent MODE`, `client-close CODE`, `stalled`, ...), flushed at once.

Failure modes (after the 101, each waits for the client's first data frame, answers it with one
binary frame `reply part 1\\n`, then fails):
  cut          half of a second binary frame, then FIN without close_notify (a truncated stream)
  reset        half of a second binary frame, then a TCP reset
  garbage      half of a second binary frame, then a record that does not decrypt
  replay       half of a second binary frame, then the reply's own record once more (replayed)
  masked       a masked frame (a server must never mask)
  close-error  a Close frame with code 1011
With --ping-first, a ping frame goes out in the same TCP write as the failure, before it (the same
read on the client's side).

Stall modes (the client is expected to have endless bytes to send, e.g. stdin from /dev/zero):
  renegotiate  TLS 1.2 only; reads and drops the client's bytes, after --stall-after seconds sends
               a HelloRequest, reads for half a second more (so a client that renegotiates gets its
               ClientHello out), then never reads or writes again
  keyupdate    TLS 1.3; never reads (and its receive buffer is small); after --stall-after seconds
               sends KeyUpdate(update_requested) records each followed by a small binary frame for
               as long as the socket takes them (at most 5 s): the client's own KeyUpdates fill the
               path until it cannot write them; then goes silent. (Meant for a client that has
               nothing of its own to send: OpenSSL 3.0 fails an SSL_read that must answer a
               KeyUpdate while one of its application records waits for the socket, "bad length".)
  stop-reading never reads, never writes after the 101 (the control case)
Each stall mode logs `stalled` once it has gone silent.

Idle modes (a connection that waits for its request, as a client's spare connection does; a
request that comes in time is answered with a 101 and every binary frame echoed back):
  idle-drop    closes a connection whose request has not come within --idle-limit seconds of its
               TLS handshake (logs `idle-closed`), as an edge closes an idle keep-alive connection
  idle-race    never closes an idle connection itself, but one whose request comes --idle-limit
               seconds or more after its handshake is closed without an answer as the request
               arrives (logs `request-after-idle`): the edge's idle close crossing the request
Both log `request-in-time` for a request they answer.

--tls12 makes any mode speak TLS 1.2 at most (renegotiate always does).
"""

import argparse
import base64
import ctypes
import ctypes.util
import hashlib
import os
import socket
import ssl
import struct
import sys
import threading
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
REPLY = b"reply part 1\n"


def log(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def frame(opcode, payload, mask=None):
    """A frame; servers never mask, but `mask` makes the hostile masked one."""
    n = len(payload)
    second = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, second | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, second | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, second | 127, n)
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return head + mask + payload
    return head + payload


class OpenSSL:
    """The two calls Python's ssl lacks, on the `SSL *` behind an ssl.SSLObject."""

    def __init__(self):
        self.lib = ctypes.CDLL(ctypes.util.find_library("ssl") or "libssl.so.3")
        for name, args in (("SSL_key_update", [ctypes.c_void_p, ctypes.c_int]),
                           ("SSL_renegotiate", [ctypes.c_void_p]),
                           ("SSL_do_handshake", [ctypes.c_void_p]),
                           ("SSL_version", [ctypes.c_void_p])):
            function = getattr(self.lib, name)
            function.argtypes = args
            function.restype = ctypes.c_int

    def pointer(self, tls_object, version):
        """CPython's _ssl._SSLSocket starts with PyObject_HEAD, a weakref, then the `SSL *`. Checked
        against the negotiated version, so a different layout stops the test instead of crashing."""
        inner = tls_object._sslobj
        head = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)   # ob_refcnt, ob_type
        ssl_pointer = ctypes.c_void_p.from_address(id(inner) + head + ctypes.sizeof(ctypes.c_void_p)).value
        wanted = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}[version]
        if not ssl_pointer or self.lib.SSL_version(ssl_pointer) != wanted:
            raise RuntimeError("cannot reach OpenSSL's SSL object from Python's ssl module")
        return ssl_pointer


class Connection:
    """One TLS connection whose records we write ourselves."""

    def __init__(self, sock, context):
        self.sock = sock
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.plain = b""

    def flush(self):
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError()
        self.incoming.write(data)

    def handshake(self):
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                self._fill()
        self.flush()

    def read_more(self):
        while True:
            try:
                self.plain += self.tls.read(65536)
                return
            except ssl.SSLWantReadError:
                self.flush()
                self._fill()

    def records(self, data):
        """`data` as TLS records (and whatever OpenSSL had queued before them), not sent."""
        self.tls.write(data)
        return self.outgoing.read()

    def request_head(self):
        while b"\r\n\r\n" not in self.plain:
            self.read_more()
        head, _, self.plain = self.plain.partition(b"\r\n\r\n")
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"sec-websocket-key":
                return value.strip()
        return None

    def client_frame(self):
        """The client's next frame: (opcode, unmasked payload)."""
        while True:
            buf = self.plain
            if len(buf) >= 2:
                n = buf[1] & 0x7F
                pos = 2
                if n == 126 and len(buf) >= 4:
                    n, pos = struct.unpack("!H", buf[2:4])[0], 4
                elif n == 127 and len(buf) >= 10:
                    n, pos = struct.unpack("!Q", buf[2:10])[0], 10
                if n < 126 or pos > 2:
                    if len(buf) >= pos + 4 + n:
                        mask = buf[pos:pos + 4]
                        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buf[pos + 4:pos + 4 + n]))
                        self.plain = buf[pos + 4 + n:]
                        return buf[0] & 0x0F, payload
            self.read_more()


def upgrade(conn):
    answer_upgrade(conn, conn.request_head())


def answer_upgrade(conn, key):
    if key is None:
        raise EOFError()
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    conn.sock.sendall(conn.records(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                   b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"))


def drain(conn):
    """Reads the client's frames until its Close or its end; logs what it saw."""
    conn.sock.settimeout(15)
    try:
        while True:
            opcode, payload = conn.client_frame()
            if opcode == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                log("client-close %s" % ("none" if code is None else code))
                return
    except (EOFError, ssl.SSLError, OSError) as error:
        log("client-gone %s" % type(error).__name__)


def idle(conn, args):
    """idle-drop / idle-race: how long the request took after the handshake decides."""
    started = time.monotonic()
    conn.sock.settimeout(args.idle_limit if args.mode == "idle-drop" else 60)
    try:
        key = conn.request_head()
    except socket.timeout:
        log("idle-closed")
        conn.sock.close()
        return
    waited = time.monotonic() - started
    if args.mode == "idle-race" and waited >= args.idle_limit:
        log("request-after-idle %.2f" % waited)
        conn.sock.close()
        return
    log("request-in-time")
    conn.sock.settimeout(60)
    answer_upgrade(conn, key)
    while True:
        opcode, payload = conn.client_frame()
        if opcode in (0x0, 0x2):
            conn.sock.sendall(conn.records(frame(0x2, payload)))
        elif opcode == 0x9:
            conn.sock.sendall(conn.records(frame(0xA, payload)))
        elif opcode == 0x8:
            conn.sock.sendall(conn.records(frame(0x8, payload[:2])))
            conn.sock.close()
            return


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def fail(conn, args):
    """Answers the client's first data frame, then fails as --mode says."""
    while True:
        opcode, payload = conn.client_frame()
        if opcode in (0x0, 0x2):
            log("request %d" % len(payload))
            break
        if opcode == 0x8:
            # A connection that closes before asking anything (a listener's start-up probe) is
            # answered at once: this edge fails only the ones that ask.
            conn.sock.sendall(conn.records(frame(0x8, payload[:2])))
            conn.sock.close()
            return
    reply = conn.records(frame(0x2, REPLY))
    conn.sock.sendall(reply)
    time.sleep(0.2)
    second = frame(0x2, b"this part of the reply is cut short\n" * 4)
    mode = args.mode
    # Records are made in the order they leave (TLS numbers them): the ping, then the rest.
    ping = conn.records(frame(0x9, b"keepalive?")) if args.ping_first else b""
    partial = conn.records(second[:len(second) // 2]) if mode in ("cut", "reset", "garbage", "replay") else b""
    if partial:
        if mode == "garbage":
            tail = b"\x17\x03\x03\x00\x20" + os.urandom(32)
        elif mode == "replay":
            tail = reply
        else:
            tail = b""
        conn.sock.sendall(ping + partial + tail)
        log("failure-sent %s" % mode)
        if mode == "cut":
            conn.sock.shutdown(socket.SHUT_WR)
            drain(conn)
        elif mode == "reset":
            reset(conn.sock)
            return
        else:
            drain(conn)
    elif mode == "masked":
        conn.sock.sendall(ping + conn.records(frame(0x2, b"masked", mask=b"\x01\x02\x03\x04")))
        log("failure-sent masked")
        drain(conn)
    elif mode == "close-error":
        conn.sock.sendall(ping + conn.records(frame(0x8, struct.pack("!H", 1011) + b"internal error")))
        log("failure-sent close-error")
        drain(conn)
    conn.sock.close()


def stall(conn, args, openssl):
    mode = args.mode
    if mode == "stop-reading":
        log("stalled")
        time.sleep(3600)
    elif mode == "renegotiate":
        ssl_pointer = openssl.pointer(conn.tls, "TLSv1.2")
        until = time.monotonic() + args.stall_after
        conn.sock.settimeout(0.1)

        def drop_for(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    if not conn.sock.recv(1 << 20):
                        return
                except socket.timeout:
                    pass

        drop_for(until - time.monotonic())
        openssl.lib.SSL_renegotiate(ssl_pointer)
        openssl.lib.SSL_do_handshake(ssl_pointer)   # writes the HelloRequest, then wants the ClientHello
        conn.sock.sendall(conn.outgoing.read())
        log("hello-request-sent")
        drop_for(0.5)
        log("stalled")
        time.sleep(3600)
    elif mode == "keyupdate":
        ssl_pointer = openssl.pointer(conn.tls, "TLSv1.3")
        time.sleep(args.stall_after)
        conn.sock.setblocking(False)
        sent = 0
        end = time.monotonic() + 5
        progress = time.monotonic()
        pending = b""
        # Until the socket has taken nothing for half a second (the client stopped reading).
        while time.monotonic() < end and time.monotonic() - progress < 0.5:
            if not pending:
                if openssl.lib.SSL_key_update(ssl_pointer, 1) != 1:
                    break
                pending = conn.records(frame(0x2, b"k"))
                sent += 1
            try:
                pending = pending[conn.sock.send(pending):]
                progress = time.monotonic()
            except BlockingIOError:
                time.sleep(0.01)
        log("keyupdates-sent %d" % sent)
        log("stalled")
        time.sleep(3600)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--mode", required=True,
                        choices=["cut", "reset", "garbage", "replay", "masked", "close-error",
                                 "renegotiate", "keyupdate", "stop-reading", "idle-drop", "idle-race"])
    parser.add_argument("--ping-first", action="store_true")
    parser.add_argument("--stall-after", type=float, default=1.0)
    parser.add_argument("--idle-limit", type=float, default=0.3)
    parser.add_argument("--tls12", action="store_true")
    args = parser.parse_args()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    if args.mode == "renegotiate" or args.tls12:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    elif args.mode == "keyupdate":
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    openssl = OpenSSL() if args.mode in ("renegotiate", "keyupdate") else None

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if args.mode == "keyupdate":
        # Accepted sockets inherit it: the client's KeyUpdates fill the path after a few thousand.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    log("hostile-edge listening on 127.0.0.1:%d" % listener.getsockname()[1])
    while True:
        raw, _ = listener.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def run(raw=raw):
            conn = Connection(raw, context)
            try:
                conn.handshake()
                if args.mode in ("idle-drop", "idle-race"):
                    idle(conn, args)
                    return
                upgrade(conn)
                if args.mode in ("renegotiate", "keyupdate", "stop-reading"):
                    stall(conn, args, openssl)
                else:
                    fail(conn, args)
            except (ssl.SSLError, OSError, EOFError) as error:
                log("connection-error %s %s" % (type(error).__name__, error))
            except RuntimeError as error:
                log("edge-error %s" % error)
            finally:
                try:
                    raw.close()
                except OSError:
                    pass

        threading.Thread(target=run, daemon=True).start()


if __name__ == "__main__":
    main()
