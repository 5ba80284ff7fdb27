# Sourced by scripts/demo and scripts/check-package: starts, on loopback, an OpenSSH sshd with a
# throwaway host key (user cfat-key from scripts/setup, key login only) and the Access edge
# emulator guarding it with a service token. The caller sets WORK (an empty directory), EDGE_BIN
# (the cf-access-edge binary), HOST (the Access hostname) and has an array PIDS for cleanup.
# Afterwards: SSHD_PORT, EDGE_PORT, $WORK/certs/ca.pem, $WORK/client_key, $WORK/known_hosts,
# FIXTURE_TOKEN_ID / FIXTURE_TOKEN_SECRET.

FIXTURE_TOKEN_ID=demo-id
FIXTURE_TOKEN_SECRET=demo-secret-123

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Waits for "... listening on 127.0.0.1:PORT" in a file and prints PORT.
wait_port() {
    local file="$1" i
    for i in $(seq 1 100); do
        if grep -qo 'listening on 127.0.0.1:[0-9]*' "$file" 2>/dev/null; then
            grep -o 'listening on 127.0.0.1:[0-9]*' "$file" | head -n1 | sed 's/.*://'
            return 0
        fi
        sleep 0.1
    done
    echo "nothing listened, see $file:" >&2
    cat "$file" >&2
    return 1
}

fixtures_certs() {
    "$EDGE_BIN" certs --out "$WORK/certs" --host "$HOST" >/dev/null
}

fixtures_sshd() {
    ssh-keygen -q -t ed25519 -N '' -C demo-host -f "$WORK/host_key"
    ssh-keygen -q -t ed25519 -N '' -C demo-client -f "$WORK/client_key"
    mkdir -p "$WORK/authorized_keys"
    cp "$WORK/client_key.pub" "$WORK/authorized_keys/cfat-key"
    # sshd reads authorized_keys as the logging-in user: let that user reach the file.
    chmod 755 "$WORK" "$WORK/authorized_keys"
    chmod 644 "$WORK/authorized_keys/cfat-key"
    SSHD_PORT="$(free_port)"
    cat >"$WORK/sshd_config" <<CONF
ListenAddress 127.0.0.1
Port $SSHD_PORT
HostKey $WORK/host_key
PidFile $WORK/sshd.pid
AuthorizedKeysFile $WORK/authorized_keys/%u
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
StrictModes no
UsePAM no
AllowUsers cfat-key
PermitRootLogin no
CONF
    /usr/sbin/sshd -D -e -f "$WORK/sshd_config" 2>"$WORK/sshd.log" &
    PIDS+=($!)
    local _
    for _ in $(seq 1 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$SSHD_PORT") 2>/dev/null && break
        sleep 0.1
    done
    echo "$HOST $(cut -d' ' -f1,2 "$WORK/host_key.pub")" >"$WORK/known_hosts"
}

fixtures_edge() {
    "$EDGE_BIN" serve --listen 127.0.0.1:0 --cert "$WORK/certs/server.pem" --key "$WORK/certs/server-key.pem" \
        --target "127.0.0.1:$SSHD_PORT" --service-token "$FIXTURE_TOKEN_ID:$FIXTURE_TOKEN_SECRET" \
        >"$WORK/edge.out" 2>"$WORK/edge.log" &
    PIDS+=($!)
    EDGE_PORT="$(wait_port "$WORK/edge.out")"
}
