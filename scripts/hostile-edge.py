#!/usr/bin/env python3
"""A small hostile (or merely unusual) TLS WebSocket edge for cf-access-tcp's carrier tests.

It answers every WebSocket upgrade with a correct `101 Switching Protocols` and then misbehaves
in one chosen way (--mode). It prints one line `hostile-edge listening on 127.0.0.1:PORT` on
stdout, then one line per event it observes (`client-close CODE`, `ping`, `tls-close-notify`,
...), flushed at once, so a test can read what the client did.

Modes (every connection of the process gets the same mode):
  coalesce        the 101 and a binary frame with --payload in ONE TLS write, then Close 1000
  split           the same bytes in two TLS writes, split at --split (or, with --sweep, at
                  offset N for the N-th connection, 0-based, counted from --split)
  ping-flood      after the 101, pings with a 125-byte payload as fast as the socket takes
                  them, never reading anything
  violation       the 101 and a frame with a reserved opcode (0x3) in one write; then reads
  bad-close       the 101, then a Close frame with --close-payload (hex), then reads
  reset           the 101 and a binary frame with --payload, then a TCP RST (SO_LINGER 0)
  pong-echo       a well-behaved edge: echoes binary frames, answers pings, logs each `ping`
  quiet           answers nothing and never reads (a dead path); logs nothing more
  burst-hold      after the 101, --burst-bytes of the pattern i % 251 in binary frames of
                  varied sizes (1 byte to 64 KiB), written as fast as the socket takes them;
                  logs `burst-sent N`, then holds the connection open and silent (no Close)
  echo-close      echoes binary frames; answers a Close; after the client's Close waits for
                  the TLS close_notify and logs `tls-close-notify` (or `tls-eof-without-close-notify`)

--log-header NAME (any mode, repeatable): each request line of header NAME (any case) is logged
as `header <Name as sent>: <value>`, in the order received (a test checks what the client sent).
A request that is not a WebSocket upgrade (no Sec-WebSocket-Key: a HEAD, a plain GET) gets no
answer but a TCP reset, and the line `not-an-upgrade METHOD`: an origin whose HTTP requests fail
while its WebSocket works.

--hold-handshake FILE (any mode): each connection logs `client-hello N` once the client's TLS
ClientHello has arrived, then holds the TLS handshake (no ServerHello) until FILE exists. A test
uses it to do something while a client's handshake is half done.
"""

import argparse
import base64
import hashlib
import os
import socket
import ssl
import struct
import sys
import threading
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def log(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def frame(opcode, payload, fin=True):
    """A server frame (unmasked)."""
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", first, n)
    elif n < 65536:
        head = struct.pack("!BBH", first, 126, n)
    else:
        head = struct.pack("!BBQ", first, 127, n)
    return head + payload


def read_request(conn, log_headers=()):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
        if len(data) > 256 * 1024:
            return None
    head, _, rest = data.partition(b"\r\n\r\n")
    method = head.split(b" ", 1)[0].decode("ascii", "replace")
    key = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
        if name.strip().lower().decode("latin-1") in log_headers:
            log("header " + name.strip().decode("latin-1") + ": " + value.strip().decode("latin-1"))
    return method, key, rest


def response(key):
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")


class ClientFrames:
    """Reads the client's (masked) frames."""

    def __init__(self, conn, pending=b""):
        self.conn = conn
        self.buf = pending

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise EOFError()
            self.buf += chunk

    def next(self):
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        opcode = b0 & 0x0F
        n = b1 & 0x7F
        pos = 2
        if n == 126:
            self._need(4)
            n = struct.unpack("!H", self.buf[2:4])[0]
            pos = 4
        elif n == 127:
            self._need(10)
            n = struct.unpack("!Q", self.buf[2:10])[0]
            pos = 10
        masked = b1 & 0x80
        if masked:
            self._need(pos + 4)
            mask = self.buf[pos:pos + 4]
            pos += 4
        self._need(pos + n)
        payload = bytearray(self.buf[pos:pos + n])
        self.buf = self.buf[pos + n:]
        if masked:
            for i in range(len(payload)):
                payload[i] ^= mask[i % 4]
        return opcode, bytes(payload)


def send_all(conn, data):
    conn.sendall(data)


def log_close(payload):
    if len(payload) >= 2:
        log("client-close %d" % struct.unpack("!H", payload[:2])[0])
    else:
        log("client-close none")


def drain_until_close(conn, frames, answer=True):
    """Reads the client's frames until its Close (answered if `answer`), then its TLS end."""
    try:
        while True:
            opcode, payload = frames.next()
            if opcode == 0x8:
                log_close(payload)
                if answer:
                    send_all(conn, frame(0x8, payload[:2]))
                break
            if opcode == 0x9:
                log("ping")
                send_all(conn, frame(0xA, payload))
            elif opcode == 0x2 or opcode == 0x0:
                send_all(conn, frame(0x2, payload))
    except EOFError:
        log("client-eof-before-close")
        return
    except (ssl.SSLError, OSError) as error:
        log("client-error %s" % type(error).__name__)
        return
    wait_tls_end(conn)


def wait_tls_end(conn):
    conn.settimeout(10)
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                log("tls-close-notify")
                return
    except ssl.SSLEOFError:
        log("tls-eof-without-close-notify")
    except socket.timeout:
        log("tls-end-timeout")
    except (ssl.SSLError, OSError) as error:
        log("tls-error %s" % type(error).__name__)


def serve(conn, args, index):
    got = read_request(conn, [name.lower() for name in args.log_header])
    if got is None:
        return
    method, key, pending = got
    if key is None:
        log("not-an-upgrade %s" % method)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        socket.socket(fileno=conn.detach()).close()
        return
    hello = response(key)
    payload = args.payload.encode()
    frames = ClientFrames(conn, pending)
    mode = args.mode
    if mode == "coalesce":
        send_all(conn, hello + frame(0x2, payload))
        send_all(conn, frame(0x8, struct.pack("!H", 1000)))
        drain_until_close(conn, frames, answer=False)
    elif mode == "split":
        data = hello + frame(0x2, payload)
        at = args.split + (index if args.sweep else 0)
        at = max(0, min(at, len(data)))
        if at > 0:
            send_all(conn, data[:at])
            time.sleep(0.05)
        send_all(conn, data[at:] + frame(0x8, struct.pack("!H", 1000)))
        drain_until_close(conn, frames, answer=False)
    elif mode == "ping-flood":
        send_all(conn, hello)
        ping = frame(0x9, b"p" * 125)
        burst = ping * 64
        sent = 0
        try:
            while True:
                send_all(conn, burst)
                sent += len(burst)
        except (ssl.SSLError, OSError) as error:
            log("flood-ended %s %d" % (type(error).__name__, sent))
    elif mode == "violation":
        send_all(conn, hello + bytes([0x83, 0x00]))
        drain_until_close(conn, frames, answer=False)
    elif mode == "bad-close":
        send_all(conn, hello)
        time.sleep(0.2)
        send_all(conn, frame(0x8, bytes.fromhex(args.close_payload)))
        drain_until_close(conn, frames, answer=False)
    elif mode == "reset":
        send_all(conn, hello + frame(0x2, payload))
        time.sleep(0.5)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raw = socket.socket(fileno=conn.detach())
        raw.close()
        log("reset")
        return
    elif mode == "pong-echo" or mode == "echo-close":
        send_all(conn, hello)
        drain_until_close(conn, frames, answer=True)
    elif mode == "quiet":
        send_all(conn, hello)
        while True:
            time.sleep(3600)
    elif mode == "burst-hold":
        send_all(conn, hello)
        pattern = bytes(i % 251 for i in range(251)) * ((64 << 10) // 251 + 2)
        sizes = [1, 700, 16 << 10, 16 << 10 + 1, 64 << 10, 3000, 40000]
        sent, index = 0, 0
        while sent < args.burst_bytes:
            size = min(sizes[index % len(sizes)], args.burst_bytes - sent)
            start = sent % 251
            send_all(conn, frame(0x2, pattern[start:start + size]))
            sent += size
            index += 1
        log("burst-sent %d" % sent)
        while True:
            time.sleep(3600)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--payload", default="hello from the edge\n")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--burst-bytes", type=int, default=8 << 20)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--close-payload", default="")
    parser.add_argument("--hold-handshake", default="")
    parser.add_argument("--log-header", action="append", default=[])
    args = parser.parse_args()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    log("hostile-edge listening on 127.0.0.1:%d" % listener.getsockname()[1])
    index = 0
    while True:
        raw, _ = listener.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def run(raw=raw, index=index):
            if args.hold_handshake:
                try:
                    raw.recv(1, socket.MSG_PEEK)
                except OSError:
                    raw.close()
                    return
                log("client-hello %d" % index)
                while not os.path.exists(args.hold_handshake):
                    time.sleep(0.02)
            try:
                conn = context.wrap_socket(raw, server_side=True, suppress_ragged_eofs=False)
            except (ssl.SSLError, OSError):
                raw.close()
                return
            try:
                serve(conn, args, index)
            except (ssl.SSLError, OSError, EOFError) as error:
                log("connection-error %s" % type(error).__name__)
            finally:
                try:
                    conn.close()
                except OSError:
                    pass

        threading.Thread(target=run, daemon=True).start()
        index += 1


if __name__ == "__main__":
    main()
