#!/usr/bin/python3
"""A small hostile (or merely misconfigured) SSH server for cf-access-tcp's shell tests (issue 16).

It listens on 127.0.0.1 (an ephemeral port), prints one line `hostile-ssh listening on
127.0.0.1:PORT` on stdout, then one line per event it observes (`hostkey ssh-ed25519`,
`auth-none USER`, `answer ...`, `exec ...`), flushed at once, so a test can read what the client
did. It sits behind the Access edge emulator as its TCP target, like sshd does.

Run it with Debian's python3 (package python3-paramiko): /usr/bin/python3 scripts/hostile-ssh.py.

Raw modes (no SSH at all):
  prebanner-flood   lines that are not an SSH identification, as fast as the client reads them
  prebanner-drip    such a line every 0.2 s, for ever
  junk-banner       1 MiB of printable junk without a line end, then holds the connection

SSH mode (`ssh`, paramiko) options:
  --host-key FILE        a host key (repeatable; OpenSSH or PEM private key files)
  --no-ssh-rsa           do not offer the ssh-rsa (SHA-1) host-key algorithm, as OpenSSH >= 8.8
  --auth none            anyone is let in without credentials
  --auth kbd             keyboard-interactive: --kbd-name, --kbd-instruction, --kbd-prompt (Python
                         escapes allowed, e.g. '\\x1b]0;pwned\\x07'); --answer is the right answer
  --auth empty           the method list is --methods (default empty); nothing is accepted
  --auth disconnect      the first authentication request is answered with SSH_MSG_DISCONNECT
                         carrying --disconnect-text
  --exec-signal NAME     a command prints `ran` and is then killed by signal NAME (escapes allowed);
                         otherwise it prints `ran` and exits 0
  --open-inbound         before answering the command, opens channels the client never asked for:
                         `auth-agent@openssh.com` (its agent) and `forwarded-tcpip` (a remote
                         forward nobody requested), logging `inbound KIND opened|refused|unanswered`
"""

import argparse
import socket
import sys
import threading
import time


def log(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def unescape(text):
    return text.encode("latin-1").decode("unicode_escape") if text is not None else None


def serve_raw(conn, mode):
    try:
        if mode == "prebanner-flood":
            line = b"This is not an SSH server yet, please wait a little longer\r\n"
            while True:
                conn.sendall(line * 64)
        elif mode == "prebanner-drip":
            n = 0
            while True:
                n += 1
                conn.sendall(b"still warming up, line %d\r\n" % n)
                time.sleep(0.2)
        elif mode == "junk-banner":
            chunk = bytes((33 + (i * 7) % 90) for i in range(4096))
            for _ in range(256):
                conn.sendall(chunk)
            log("junk-sent")
            while conn.recv(4096):
                pass
    except OSError:
        pass
    finally:
        conn.close()


def serve_ssh(conn, args):
    import paramiko
    from paramiko.common import cMSG_CHANNEL_REQUEST, cMSG_DISCONNECT

    class Server(paramiko.ServerInterface):
        def __init__(self):
            self.exec_event = threading.Event()
            self.command = None
            self.transport = None

        def get_allowed_auths(self, username):
            if args.auth == "none":
                return "none"
            if args.auth == "kbd":
                return "keyboard-interactive"
            if args.auth == "empty":
                return unescape(args.methods)
            return "password"

        def check_auth_none(self, username):
            log("auth-none %s" % username)
            if args.auth == "disconnect":
                m = paramiko.Message()
                m.add_byte(cMSG_DISCONNECT)
                m.add_int(11)
                m.add_string(unescape(args.disconnect_text))
                m.add_string("")
                self.transport._send_user_message(m)
                log("disconnect-sent")
                time.sleep(0.5)
                self.transport.close()
                return paramiko.AUTH_FAILED
            return paramiko.AUTH_SUCCESSFUL if args.auth == "none" else paramiko.AUTH_FAILED

        def check_auth_password(self, username, password):
            log("auth-password %s" % username)
            return paramiko.AUTH_FAILED

        def check_auth_publickey(self, username, key):
            log("auth-publickey %s" % username)
            return paramiko.AUTH_FAILED

        def check_auth_interactive(self, username, submethods):
            log("auth-kbd %s" % username)
            if args.auth != "kbd":
                return paramiko.AUTH_FAILED
            query = paramiko.InteractiveQuery(unescape(args.kbd_name), unescape(args.kbd_instruction))
            query.add_prompt(unescape(args.kbd_prompt), False)
            return query

        def check_auth_interactive_response(self, responses):
            log("answer %s" % ("right" if list(responses) == [args.answer] else "wrong"))
            return paramiko.AUTH_SUCCESSFUL if list(responses) == [args.answer] else paramiko.AUTH_FAILED

        def check_channel_request(self, kind, chanid):
            return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

        def check_channel_exec_request(self, channel, command):
            self.command = command.decode("utf-8", "replace")
            self.exec_event.set()
            return True

        def check_channel_pty_request(self, *a):
            log("pty")
            return True

        def check_channel_shell_request(self, channel):
            self.exec_event.set()
            return True

    disabled = {"keys": ["ssh-rsa"]} if args.no_ssh_rsa else None
    transport = paramiko.Transport(conn, disabled_algorithms=disabled)
    transport.use_compression(True)   # offered; the client picks (none unless it asks for zlib)
    for path in args.host_key:
        transport.add_server_key(load_key(paramiko, path))
    server = Server()
    server.transport = transport
    try:
        transport.start_server(server=server)
    except Exception as error:  # the client gave up during the key exchange
        log("kex-failed %s" % type(error).__name__)
        log("client %s" % transport.remote_version)
        return
    log("hostkey %s" % transport.host_key_type)
    log("compression %s" % transport.remote_compression)
    log("client %s" % transport.remote_version)
    channel = transport.accept(60)
    if channel is None:
        log("no-channel")
        transport.close()
        return
    server.exec_event.wait(30)
    log("exec %s" % server.command)
    if args.open_inbound:
        for kind, dest, src in (("auth-agent@openssh.com", None, None),
                                ("forwarded-tcpip", ("127.0.0.1", 22), ("203.0.113.9", 4444))):
            try:
                extra = transport.open_channel(kind, dest_addr=dest, src_addr=src, timeout=3)
                log("inbound %s opened" % kind)
                extra.close()
            except paramiko.ChannelException:
                log("inbound %s refused" % kind)
            except paramiko.SSHException:
                log("inbound %s unanswered" % kind)
    channel.sendall(b"ran\n")
    time.sleep(0.2)
    if args.exec_signal is not None:
        m = paramiko.Message()
        m.add_byte(cMSG_CHANNEL_REQUEST)
        m.add_int(channel.remote_chanid)
        m.add_string("exit-signal")
        m.add_boolean(False)
        m.add_string(unescape(args.exec_signal))
        m.add_boolean(False)
        m.add_string("")
        m.add_string("")
        transport._send_user_message(m)
    else:
        channel.send_exit_status(0)
    channel.shutdown_write()
    time.sleep(0.2)
    channel.close()
    deadline = time.time() + 10
    while transport.is_active() and time.time() < deadline:
        time.sleep(0.1)
    transport.close()


def load_key(paramiko, path):
    for kind in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return kind(filename=path)
        except Exception:
            continue
    raise SystemExit("cannot load host key %s" % path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True,
                        choices=["prebanner-flood", "prebanner-drip", "junk-banner", "ssh"])
    parser.add_argument("--host-key", action="append", default=[])
    parser.add_argument("--no-ssh-rsa", action="store_true")
    parser.add_argument("--auth", default="none", choices=["none", "kbd", "empty", "disconnect"])
    parser.add_argument("--kbd-name", default="")
    parser.add_argument("--kbd-instruction", default="")
    parser.add_argument("--kbd-prompt", default="Code: ")
    parser.add_argument("--answer", default="right")
    parser.add_argument("--methods", default="")
    parser.add_argument("--disconnect-text", default="bye")
    parser.add_argument("--exec-signal", default=None)
    parser.add_argument("--open-inbound", action="store_true")
    args = parser.parse_args()

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    log("hostile-ssh listening on 127.0.0.1:%d" % listener.getsockname()[1])
    while True:
        conn, _ = listener.accept()
        log("connection")
        if args.mode == "ssh":
            target, arguments = serve_ssh, (conn, args)
        else:
            target, arguments = serve_raw, (conn, args.mode)
        threading.Thread(target=target, args=arguments, daemon=True).start()


if __name__ == "__main__":
    main()
