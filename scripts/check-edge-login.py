#!/usr/bin/env python3
"""End-to-end checks of cf-access-edge's login protocol (reference/EMULATOR.md) with curl,
python's `cryptography` and PyNaCl (`pip install pynacl cryptography`).

    scripts/check-edge-login.py PATH/TO/cf-access-edge

Starts the emulator many times with different knobs on 127.0.0.1, talks to it under real names
with `curl --resolve` and the test CA, and prints one ok/FAIL line per check; exits 1 on any
failure. Not part of scripts/test (it needs the two Python packages)."""
import base64, json, os, re, signal, socket, ssl, subprocess, sys, tempfile, time, urllib.parse
from cryptography.hazmat.primitives.asymmetric import rsa, padding
from cryptography.hazmat.primitives import hashes
from cryptography import x509
from nacl.public import PrivateKey, PublicKey, Box

EDGE = sys.argv[1]
BROWSER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-browser")
WORK = tempfile.mkdtemp(prefix="edge-login-check.")
CERTS = WORK + "/certs"
TEAM = "emulator"
APP = "ssh.example.test"
AUTH = f"{TEAM}.cloudflareaccess.com"
XFER = "login.cloudflareaccess.org"
failures = []

def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)

def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))

def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)

if not os.path.exists(CERTS + "/ca.pem"):
    r = run([EDGE, "certs", "--out", CERTS, "--host", APP, "--host", AUTH, "--host", XFER, "--host", "admin.edge.test"])
    assert r.returncode == 0, r.stderr

class Edge:
    def __init__(self, *extra):
        self.p = subprocess.Popen([EDGE, "serve", "--listen", "127.0.0.1:0", "--cert", CERTS + "/server.pem",
                                   "--key", CERTS + "/server-key.pem", "--team", TEAM, "--verbose",
                                   # this script checks immediate poll answers and the team-set
                                   # CF_AppSession layout; the defaults hold polls, as Cloudflare does
                                   "--transfer-hold", "0", "--app-session-layout", "team", *extra],
                                  stdout=subprocess.PIPE, stderr=open(WORK + "/edge.log", "a"), text=True)
        line = self.p.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        self.port = int(m.group(1))
    def stop(self):
        self.p.send_signal(signal.SIGTERM); self.p.wait(10)
    def curl(self, url, *args):
        """Returns (status, headers dict lower->list, body)."""
        host = urllib.parse.urlsplit(url).hostname
        res = []
        for h in [APP, AUTH, XFER, "admin.edge.test"]:
            res += ["--resolve", f"{h}:{self.port}:127.0.0.1"]
        r = run(["curl", "-sS", "--max-time", "15", "--noproxy", "*", "--cacert", CERTS + "/ca.pem", *res,
                 "-D", WORK + "/hdr", "-o", WORK + "/body", *args, url])
        if r.returncode != 0:
            return (None, {}, r.stderr)
        raw = open(WORK + "/hdr").read()
        lines = raw.strip().split("\n")
        status = int(lines[0].split()[1])
        headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            headers.setdefault(k.strip().lower(), []).append(v.strip())
        return (status, headers, open(WORK + "/body").read())
    def u(self, host, path):
        return f"https://{host}:{self.port}{path}"
    def admin(self, action):
        return self.curl(self.u(APP, "/cdn-cgi/edge/admin/" + action), "-X", "POST")
    def stats(self):
        return json.loads(self.curl(self.u(APP, "/cdn-cgi/edge/stats"))[2])
    def upgrade(self, headers):
        ctx = ssl.create_default_context(cafile=CERTS + "/ca.pem")
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        t = ctx.wrap_socket(s, server_hostname=APP)
        req = (f"GET /ssh HTTP/1.1\r\nHost: {APP}:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
        for k, v in headers.items():
            req += f"{k}: {v}\r\n"
        t.sendall((req + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = t.recv(4096)
            if not chunk: break
            data += chunk
        t.close()
        head = data.split(b"\r\n\r\n")[0].decode()
        status = int(head.split()[1])
        loc = re.search(r"(?im)^location: (.*)$", head)
        return status, (loc.group(1).strip() if loc else None)

def jwks_keys(edge):
    st, _, body = edge.curl(edge.u(AUTH, "/cdn-cgi/access/certs"))
    doc = json.loads(body)
    keys = {}
    for k in doc["keys"]:
        n = int.from_bytes(b64url(k["n"]), "big"); e = int.from_bytes(b64url(k["e"]), "big")
        keys[k["kid"]] = rsa.RSAPublicNumbers(e, n).public_key()
    return st, doc, keys

def verify_jwt(token, keys):
    h, p, s = token.split(".")
    header = json.loads(b64url(h)); claims = json.loads(b64url(p))
    key = keys.get(header.get("kid"))
    if key is None:
        return header, claims, "unknown-kid"
    try:
        key.verify(b64url(s), f"{h}.{p}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return header, claims, "valid"
    except Exception:
        return header, claims, "bad-signature"

def metadata(edge):
    st, hd, _ = edge.curl(edge.u(APP, "/"), "-I", "-H", "cf-access-metadata-request: true")
    return st, hd.get("cf-access-metadata", [None])[0]

AUD = "4b1d6c0e8f2a93d57e6c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a098f7e6d5"

# ---------- 1. metadata + JWKS ----------
edge = Edge("--app-hostname", "*.example.test")
st, doc, keys = jwks_keys(edge)
check(st == 200 and len(doc["keys"]) == 1, "JWKS 200 with one key")
k = doc["keys"][0]
check(set(k) == {"kid", "kty", "alg", "use", "n", "e"} and k["kty"] == "RSA" and k["alg"] == "RS256" and k["use"] == "sig", "JWKS key fields")
check("=" not in k["n"] and "=" not in k["e"] and k["e"] == "AQAB", "n/e base64url unpadded, e=65537")
check(len(b64url(k["n"])) == 256, "2048-bit modulus")
cert = x509.load_pem_x509_certificate(doc["public_cert"]["cert"].encode())
check(cert.public_key().public_numbers().n == keys[k["kid"]].public_numbers().n and doc["public_cert"]["kid"] == k["kid"] and len(doc["public_certs"]) == 1, "public_cert matches key")
st, tok = metadata(edge)
check(st == 200 and tok, "metadata HEAD 200 with header")
header, claims, verdict = verify_jwt(tok, keys)
check(verdict == "valid" and header["alg"] == "RS256" and header["kid"] == k["kid"], "metadata JWT verifies against JWKS")
check(claims["type"] == "match" and claims["hostname"] == APP and claims["auth_domain"] == AUTH and claims["aud"] == AUD
      and claims["app_hostname"] == "*.example.test" and abs(claims["iat"] - time.time()) < 5, f"metadata claims {claims}")
st, hd, _ = edge.curl(edge.u(APP, "/"), "-H", "cf-access-metadata-request: true")
check(st == 200 and "cf-access-metadata" in hd, "metadata via GET too")
# rotation via admin
st, _, newkid = edge.admin("rotate-key")
st2, doc2, keys2 = jwks_keys(edge)
check(st == 200 and len(newkid) == 64 and [x["kid"] for x in doc2["keys"]] == [newkid, k["kid"]], "rotate-key: JWKS lists new then old")
header, claims, verdict = verify_jwt(metadata(edge)[1], keys2)
check(verdict == "valid" and header["kid"] == newkid, "metadata now signed by the new kid")
check(verify_jwt(tok, keys2)[2] == "valid", "old metadata still verifies with JWKS after rotation")
st, hd, _ = edge.curl(edge.u(AUTH, "/cdn-cgi/access/certs"), "-X", "POST")
check(st == 405, "JWKS POST -> 405")
s = edge.stats()
check(s["metadataRequests"] == 3 and s["jwksRequests"] == 2 and s["keyRotations"] == 1, f"stats metadata/jwks/rotations {s['metadataRequests']},{s['jwksRequests']},{s['keyRotations']}")
edge.stop()

edge = Edge("--rotate-kid-after", "2")
kids = [verify_jwt(metadata(edge)[1], {})[0]["kid"] for _ in range(5)]
check(kids[0] == kids[1] and kids[1] != kids[2] and kids[2] == kids[3] and kids[3] != kids[4], f"--rotate-kid-after 2 rotates every 2 ({[x[:6] for x in kids]})")
_, doc, _ = jwks_keys(edge)
check(len(doc["keys"]) == 3, "JWKS lists all 3 keys")
edge.stop()

# ---------- 2. metadata faults ----------
for mode in ["missing", "bad-signature", "unknown-kid", "wrong-type", "wrong-hostname", "wrong-aud-empty",
             "stale-iat", "future-iat", "foreign-auth-domain", "bad-base64"]:
    edge = Edge("--metadata-mode", mode)
    _, _, keys = jwks_keys(edge)
    st, tok = metadata(edge)
    if mode == "missing":
        check(st == 200 and tok is None, "missing: no header")
    elif mode == "bad-base64":
        ok = False
        try:
            verify_jwt(tok, keys)
        except Exception:
            ok = True
        check(ok, f"bad-base64: undecodable ({tok})")
    else:
        header, claims, verdict = verify_jwt(tok, keys)
        expect = {
            "bad-signature": verdict == "bad-signature",
            "unknown-kid": verdict == "unknown-kid",
            "wrong-type": verdict == "valid" and claims["type"] != "match",
            "wrong-hostname": verdict == "valid" and claims["hostname"] != APP,
            "wrong-aud-empty": verdict == "valid" and claims["aud"] == "",
            "stale-iat": verdict == "valid" and time.time() - claims["iat"] > 24 * 3600,
            "future-iat": verdict == "valid" and claims["iat"] - time.time() > 300,
            "foreign-auth-domain": verdict == "valid" and not claims["auth_domain"].endswith(".cloudflareaccess.com"),
        }[mode]
        check(expect, f"{mode}: {verdict} {claims}")
    edge.stop()

# ---------- 3. transfer flow ----------
def cli_url(edge, pk, aud=AUD, extra="&send_org_token=true&edge_token_transfer=true"):
    redirect = urllib.parse.quote(f"https://{APP}:{edge.port}/?token={pk}&aud={aud}", safe="")
    return edge.u(APP, f"/cdn-cgi/access/cli?token={urllib.parse.quote(pk, safe='')}&aud={aud}&redirect_url={redirect}{extra}")

def new_client():
    sk = PrivateKey.generate()
    return sk, base64.urlsafe_b64encode(bytes(sk.public_key)).decode()

def poll(edge, pk):
    return edge.curl(f"https://{XFER}:{edge.port}/transfer/{urllib.parse.quote(pk, safe='')}")

def open_box(sk, hd, body):
    server_pk = PublicKey(base64.urlsafe_b64decode(hd["service-public-key"][0]))
    return json.loads(Box(sk, server_pk).decrypt(base64.b64decode(body)))

edge = Edge("--token-ttl", "120", "--org-token-ttl", "600")
_, _, keys = jwks_keys(edge)
sk, pk = new_client()
st, _, _ = poll(edge, pk)
check(st == 404, f"poll before login -> 404 ({st})")
st, _, body = edge.curl(cli_url(edge, pk))
check(st == 200 and "You may close this window" in body, "cli page completes login with 200")
st, hd, body = poll(edge, pk)
check(st == 200 and "service-public-key" in hd, "poll after login -> 200 with service-public-key")
tokens = open_box(sk, hd, body)
check(set(tokens) == {"app_token", "org_token"}, "box opens with PyNaCl into app_token + org_token")
h, app_claims, v = verify_jwt(tokens["app_token"], keys)
check(v == "valid" and app_claims["aud"] == [AUD] and app_claims["iss"] == f"https://{AUTH}" and app_claims["type"] == "app"
      and app_claims["exp"] - app_claims["iat"] == 120 and app_claims["email"] and app_claims["sub"], f"app token claims {app_claims}")
h, org_claims, v = verify_jwt(tokens["org_token"], keys)
check(v == "valid" and org_claims["type"] == "org" and org_claims["exp"] - org_claims["iat"] == 600, f"org token claims {org_claims}")
st, _, _ = poll(edge, pk)
check(st == 404, "delivery is one-shot (404 after)")
# bad inputs on cli page
for label, url in [("standard alphabet key", cli_url(edge, base64.b64encode(b"\xfb" * 32).decode())),
                   ("unpadded key", cli_url(edge, pk.rstrip("="))),
                   ("short key", cli_url(edge, base64.urlsafe_b64encode(b"x" * 31).decode())),
                   ("wrong aud", cli_url(edge, pk, aud="ab" * 32)),
                   ("no edge_token_transfer", cli_url(edge, pk, extra="&send_org_token=true"))]:
    st, _, _ = edge.curl(url)
    check(st == 400, f"cli page {label} -> 400 ({st})")
sk2, pk2 = new_client()
edge.curl(cli_url(edge, pk2, extra="&edge_token_transfer=true"))
st, hd, body = poll(edge, pk2)
check(st == 200 and set(open_box(sk2, hd, body)) == {"app_token"}, "without send_org_token only app_token")
# test-browser
env = dict(os.environ, CF_ACCESS_TEST_CA=CERTS + "/ca.pem",
           CF_ACCESS_TEST_RESOLVE=f"{APP}:{edge.port}:127.0.0.1, {XFER}:{edge.port}:127.0.0.1",
           CF_ACCESS_TEST_BROWSER_LOG=WORK + "/browser.log")
sk3, pk3 = new_client()
r = subprocess.run([BROWSER, cli_url(edge, pk3)], env=env, capture_output=True, text=True)
check(r.returncode == 0 and "HTTP 200" in r.stderr, f"test-browser exits 0: {r.stderr.strip()}")
st, hd, body = poll(edge, pk3)
check(st == 200 and "app_token" in open_box(sk3, hd, body), "login via test-browser delivers")
r = subprocess.run([BROWSER, cli_url(edge, "bad")], env=env, capture_output=True, text=True)
check(r.returncode == 1, f"test-browser exits 1 on 400: {r.stderr.strip()}")

# ---------- 4. upgrade with issued tokens, revocation ----------
app_token = tokens["app_token"]
check(edge.upgrade({})[0] == 302, "upgrade without credentials -> 302")
st, loc = edge.upgrade({"Cf-Access-Token": app_token})
check(st in (400, 101), f"upgrade with issued app token accepted by Access (no target -> 400) ({st})")
st, loc = edge.upgrade({"Cf-Access-Token": app_token, "Cf-Access-Jump-Destination": "127.0.0.1:1"})
check(st == 502, f"... and dials the target (502 for a closed port) ({st})")
st, loc = edge.upgrade({"Cf-Access-Token": tokens["org_token"]})
check(st == 302, "org token is not an app token -> 302")
# token check
st, _, _ = edge.curl(edge.u(APP, "/anything?cloudflared_token_check=true"), "-H", f"Cf-Access-Token: {app_token}")
check(st == 200, "token check valid -> 200")
st, hd, _ = edge.curl(edge.u(APP, "/anything?cloudflared_token_check=true"), "-H", "Cf-Access-Token: garbage")
check(st == 302 and "/cdn-cgi/access/login/" in hd["location"][0], "token check invalid -> 302 login")
st, _, expired = edge.admin("issue?kind=app&ttl=-5")
check(st == 200 and verify_jwt(expired, keys)[1]["exp"] < time.time(), "admin issue ttl<0 gives expired token")
st, _, _ = edge.curl(edge.u(APP, "/x?cloudflared_token_check=true"), "-H", f"Cf-Access-Token: {expired}")
check(st == 302, "token check expired -> 302")
st, _, foreign = edge.admin("issue?kind=app&aud=foreign")
check(verify_jwt(foreign, keys)[1]["aud"] == ["foreign"], "issue with aud override")
st, _, _ = edge.curl(edge.u(APP, "/x?cloudflared_token_check=true"), "-H", f"Cf-Access-Token: {foreign}")
check(st == 302, "token check foreign aud -> 302")
st, _, body = edge.admin("revoke")
check(st == 200 and "revoked" in body, f"revoke: {body.strip()}")
st, loc = edge.upgrade({"Cf-Access-Token": app_token})
check(st == 302 and loc.startswith(f"https://{AUTH}:{edge.port}/cdn-cgi/access/login/{APP}?kid={AUD}&redirect_url="), f"revoked token upgrade -> 302 {loc}")
st, _, _ = edge.curl(edge.u(APP, "/x?cloudflared_token_check=true"), "-H", f"Cf-Access-Token: {app_token}")
check(st == 302, "token check revoked -> 302")
st, _, fresh = edge.admin("issue?kind=app")
st, _, _ = edge.curl(edge.u(APP, "/x?cloudflared_token_check=true"), "-H", f"Cf-Access-Token: {fresh}")
check(st == 200, "token issued after revoke is good")
st, _, _ = edge.curl(edge.u(APP, "/cdn-cgi/edge/admin/revoke"))
check(st == 405, "admin GET -> 405")

# ---------- 5. org exchange ----------
org = tokens["org_token"]
st, hd, _ = edge.curl(edge.u(APP, "/"), "-I")
login = hd["location"][0]
check(st == 302 and login.startswith(f"https://{AUTH}:{edge.port}/cdn-cgi/access/login/{APP}?"), f"hop1 HEAD app -> 302 login {login}")
st, hd, body = edge.curl(login, "-I")
check(st == 200 and "set-cookie" not in hd, "login without org token -> 200 page, no cookie")
st, hd, body = edge.curl(login, "-I", "-H", f"Cookie: CF_Authorization={app_token}")
check(st == 200, "login with an app token as org cookie -> 200 page")
st, hd, _ = edge.curl(login, "-I", "-H", f"Cookie: CF_Authorization={org}")
authorized = hd.get("location", [""])[0]
sess = re.match(r"CF_AppSession=([^;]+)", hd.get("set-cookie", [""])[0])
check(st == 302 and authorized.startswith(f"https://{APP}:{edge.port}/cdn-cgi/access/authorized") and sess, f"hop2 login+org cookie -> 302 authorized {authorized}")
st, hd, _ = edge.curl(authorized, "-I")
check(st == 403, "authorized without session -> 403")
st, hd, _ = edge.curl(authorized, "-I", "-H", f"Cookie: CF_AppSession={sess.group(1)}")
newtok = re.match(r"CF_Authorization=([^;]+)", hd.get("set-cookie", [""])[0])
check(st == 302 and hd["location"][0] == f"https://{APP}:{edge.port}/" and newtok, f"hop3 authorized -> 302 / with CF_Authorization")
check(verify_jwt(newtok.group(1), keys)[2] == "valid" and verify_jwt(newtok.group(1), keys)[1]["aud"] == [AUD], "exchanged app token valid")
st, _, _ = edge.curl(authorized, "-I", "-H", f"Cookie: CF_AppSession={sess.group(1)}")
check(st == 403, "session is one-shot")
st, _, _ = edge.curl(edge.u(APP, "/"), "-H", f"Cf-Access-Token: {newtok.group(1)}")
check(st == 200, "exchanged token opens the app page")
st, _, _ = edge.curl(edge.u(APP, "/"), "-H", f"Cookie: CF_Authorization={newtok.group(1)}")
check(st == 200, "... also as cookie")
st, loc = edge.upgrade({"Cf-Access-Token": newtok.group(1), "Cf-Access-Jump-Destination": "127.0.0.1:1"})
check(st == 502, "exchanged token passes the upgrade check after revoke (heal)")
s = edge.stats()
print(json.dumps(s))
check(s["cliPageRequests"] == 9 and s["transferPolls"] == 5 and s["transfersDelivered"] == 3 and s["loginsCompleted"] == 3
      and s["orgExchanges"] == 1 and s["tokenChecks"] == 6 and s["revocations"] == 1, "login stats counted")
edge.stop()

# ---------- 6. manual login + admin complete ----------
edge = Edge("--login-mode", "manual")
sk, pk = new_client()
st, _, body = edge.curl(cli_url(edge, pk))
check(st == 200 and "Waiting" in body, "manual: cli page 200 waiting")
check(poll(edge, pk)[0] == 404, "manual: not yet")
st, _, body = edge.admin("complete?token=" + urllib.parse.quote(pk, safe=""))
check(st == 200 and body.strip() == "completed", "admin complete")
st, _, body = edge.admin("complete?token=" + urllib.parse.quote(pk, safe=""))
check(body.strip() == "already completed", "admin complete again: already")
st, hd, body = poll(edge, pk)
check(st == 200 and "org_token" in open_box(sk, hd, body), "manual: delivered after admin complete")
sk, pk = new_client()
edge.admin("complete?token=" + pk.replace("=", "%3D"))
st, hd, body = poll(edge, pk)
check(st == 200 and open_box(sk, hd, body), "admin complete without cli page (another device)")
edge.stop()

# ---------- 7. transfer faults ----------
for mode in ["error500", "never", "hang", "wrong-key", "truncated", "bad-base64"]:
    edge = Edge("--transfer-mode", mode)
    sk, pk = new_client()
    edge.curl(cli_url(edge, pk))
    if mode == "hang":
        st, _, err = edge.curl(f"https://{XFER}:{edge.port}/transfer/{pk}", "--max-time", "2")
        check(st is None and "timed out" in err.lower(), f"hang: no answer ({err.strip()})")
    else:
        st, hd, body = poll(edge, pk)
        if mode == "error500": check(st == 500, "error500 -> 500")
        elif mode == "never": check(st == 404, "never -> 404 after completion")
        elif mode == "wrong-key":
            try:
                open_box(sk, hd, body); okk = False
            except Exception as e:
                okk = type(e).__name__ == "CryptoError"
            check(st == 200 and okk, "wrong-key: 200 but box does not open")
        elif mode == "truncated": check(st == 200 and len(base64.b64decode(body)) < 24, "truncated: short body")
        elif mode == "bad-base64":
            try:
                base64.b64decode(body, validate=True); bad = False
            except Exception:
                bad = True
            check(st == 200 and bad, "bad-base64: body not base64")
    edge.stop()

# ---------- 7b. WebSocket piping with an issued token ----------
def ws_echo(edge, token, target):
    ctx = ssl.create_default_context(cafile=CERTS + "/ca.pem")
    t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", edge.port), timeout=10), server_hostname=APP)
    t.sendall((f"GET / HTTP/1.1\r\nHost: {APP}:{edge.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
               f"Cf-Access-Token: {token}\r\nCf-Access-Jump-Destination: {target}\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += t.recv(4096)
    head, rest = data.split(b"\r\n\r\n", 1)
    if b" 101 " not in head.split(b"\r\n")[0]:
        return None
    payload = b"hello through the tunnel"
    mask = os.urandom(4)
    t.sendall(bytes([0x82, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    while len(rest) < 2 + len(payload):
        rest += t.recv(4096)
    t.close()
    return rest[2:2 + len(payload)] if rest[0] == 0x82 else None

target = subprocess.Popen([EDGE, "target", "echo", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
tport = re.search(r":(\d+)$", target.stdout.readline().strip()).group(1)
edge = Edge()
_, _, tok = edge.admin("issue?kind=app")
check(ws_echo(edge, tok, f"127.0.0.1:{tport}") == b"hello through the tunnel", "WebSocket echo through the tunnel with an issued app token")
edge.admin("revoke")
check(ws_echo(edge, tok, f"127.0.0.1:{tport}") is None, "after revoke the upgrade is refused")
s = edge.stats()
check(s["upgradesAccepted"] == 1 and s["bytesIn"] == 24, "tunnel stats still counted")
edge.stop(); target.terminate()

# ---------- 8. existing behaviour: service tokens + fixed app tokens ----------
edge = Edge("--service-token", "id1:sec1", "--app-token", "fixed-token")
check(edge.upgrade({"Cf-Access-Client-Id": "id1", "Cf-Access-Client-Secret": "sec1"})[0] == 400, "service token still accepted (400 no target)")
check(edge.upgrade({"Cf-Access-Token": "fixed-token"})[0] == 400, "fixed app token still accepted")
check(edge.upgrade({"Cf-Access-Client-Id": "id1", "Cf-Access-Client-Secret": "bad"})[0] == 302, "bad service token -> 302")
edge.stop()

print(f"\nedge log: {WORK}/edge.log")
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
