#!/usr/bin/env python3
"""A small TLS WebSocket "edge" that writes bytes exactly as a test case needs.

It is not the emulator and shares no code with ours: it reads the client's upgrade request,
then answers as --mode says, choosing where TLS records begin and end.

Modes:
  banner      answer 101 and, right behind it, one binary frame carrying --banner. Connection k
              (0, 1, 2, ...) writes the 101 and the frame in ONE TLS record when k == 0, else
              splits those bytes into two records at offset k (connections past the end write one
              record again). So a listener test walks every split offset with one edge.
  dribble     answer 101 and one binary frame carrying --banner, every byte in a TLS record of its
              own (the head and the frame arrive in ~150 records).
  bad-accept  answer 101 with a wrong Sec-WebSocket-Accept.
  no-upgrade  answer 101 without the Upgrade header.
  not-http    answer with bytes that are not HTTP (and keep the connection open).
  not-http-close  the same, then close the connection.
  endless     answer "HTTP/1.1 101" and then header lines forever (until the client goes).

Proxy modes: the listener is an HTTP proxy (plain TCP) that reads the client's CONNECT request
and logs its first line to stderr, then:
  proxy-dribble   answers "200 Connection established" one byte per TCP write, then is the edge
                  itself on that connection (TLS, then banner mode's one-record answer).
  proxy-407       answers "407 Proxy Authentication Required" and closes.
  proxy-close     closes without answering.
  proxy-not-http  answers with bytes that are not HTTP and closes.

It writes its port to --port-file once it listens, serves until killed, and logs one line per
connection to stderr.
"""
import argparse
import base64
import hashlib
import socket
import ssl
import struct
import sys
import threading
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
        if len(data) > 1 << 20:
            return None
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    headers = {}
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


def accept_value(key):
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def response_101(accept):
    return ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Accept: %s\r\n\r\n" % accept).encode()


def binary_frame(payload):
    if len(payload) < 126:
        return bytes([0x82, len(payload)]) + payload
    return bytes([0x82, 126]) + struct.pack("!H", len(payload)) + payload


def serve(conn, index, args):
    try:
        headers = read_request(conn)
        if headers is None:
            return
        key = headers.get("sec-websocket-key", "")
        if args.mode == "proxy-dribble":
            index = 0   # one record: the proxy's dribbled answer is what this mode is about
        if args.mode in ("banner", "proxy-dribble"):
            data = response_101(accept_value(key)) + binary_frame(args.banner.encode())
            split = index if 0 < index < len(data) else 0
            if split:
                conn.sendall(data[:split])
                time.sleep(0.02)
                conn.sendall(data[split:])
            else:
                conn.sendall(data)
            print("connection %d: 101 + frame, %s" % (index, "split at %d" % split if split else "one record"),
                  file=sys.stderr, flush=True)
        elif args.mode == "dribble":
            for byte in response_101(accept_value(key)) + binary_frame(args.banner.encode()):
                conn.sendall(bytes([byte]))
        elif args.mode == "no-upgrade":
            conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                          "Sec-WebSocket-Accept: %s\r\n\r\n" % accept_value(key)).encode())
        elif args.mode == "bad-accept":
            conn.sendall(response_101(base64.b64encode(b"not the right hash!!").decode()))
        elif args.mode == "not-http":
            conn.sendall(b"SSH-2.0-OpenSSH_9.2 not a web server\r\n")
        elif args.mode == "not-http-close":
            conn.sendall(b"SSH-2.0-OpenSSH_9.2 not a web server\r\n")
            return
        elif args.mode == "endless":
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\n")
            n = 0
            while True:
                conn.sendall(b"X-Filler-%d: %s\r\n" % (n, b"y" * 200))
                n += 1
        # Hold the connection open until the client goes (or 30 s): the test decides the end.
        conn.settimeout(30)
        while conn.recv(65536):
            pass
    except (OSError, ssl.SSLError):
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def read_connect(raw):
    """Reads a CONNECT request head byte by byte (nothing after it); returns its first line."""
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        chunk = raw.recv(1)
        if not chunk:
            return None
        data += chunk
    return data.split(b"\r\n", 1)[0].decode("latin-1")


def proxy(raw, index, args, context):
    """Plays the proxy of a proxy mode on one accepted TCP connection."""
    try:
        line = read_connect(raw)
        print("proxy %d: %s" % (index, line), file=sys.stderr, flush=True)
        if line is None:
            return
        if args.mode == "proxy-dribble":
            for byte in b"HTTP/1.1 200 Connection established\r\n\r\n":
                raw.sendall(bytes([byte]))
                time.sleep(0.002)
            conn = context.wrap_socket(raw, server_side=True)
            serve(conn, index, args)
            return
        if args.mode == "proxy-407":
            raw.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n")
        elif args.mode == "proxy-not-http":
            raw.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
    except (OSError, ssl.SSLError):
        pass
    finally:
        try:
            raw.close()
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--mode", choices=["banner", "dribble", "bad-accept", "no-upgrade", "not-http", "not-http-close",
                                           "endless", "proxy-dribble", "proxy-407", "proxy-close", "proxy-not-http"],
                        default="banner")
    parser.add_argument("--banner", default="SSH-2.0-HostileEdge_1.0\r\n")
    args = parser.parse_args()

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    with open(args.port_file + ".tmp", "w") as handle:
        handle.write(str(listener.getsockname()[1]))
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    index = 0
    while True:
        raw, _ = listener.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if args.mode.startswith("proxy-"):
            threading.Thread(target=proxy, args=(raw, index, args, context), daemon=True).start()
            index += 1
            continue
        try:
            conn = context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            continue
        threading.Thread(target=serve, args=(conn, index, args), daemon=True).start()
        index += 1


if __name__ == "__main__":
    main()
