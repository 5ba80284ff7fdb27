/* ssh_engine_probe: one SSH library moves N bytes through an exec channel over plain TCP to sshd,
 * and reports what it cost this process. Built and run by scripts/bench-ssh-engines, which
 * compares libssh2 (the one `cf-access-tcp shell` links), libssh and OpenSSH's ssh; not part of
 * the product and not built by CI.
 *
 *   ssh_engine_probe libssh2|libssh HOST PORT USER KEY download|upload BYTES CIPHER
 *
 * The remote command is `head -c BYTES /dev/zero` (download) or `head -c BYTES >/dev/null`
 * (upload). One line of JSON on stdout: library version, negotiated cipher, seconds from the
 * exec to the end, CPU seconds (user + system) of the whole run. Exit 3: the library does not
 * offer CIPHER; 1: anything else failed (a line on stderr). */
#include <arpa/inet.h>
#include <libssh/libssh.h>
#include <libssh2.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (256 * 1024)
static char data[CHUNK];

struct outcome {
    const char *version;
    char cipher[64];
    double started;
};

static double monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void fail(int status, const char *what, const char *detail) {
    fprintf(stderr, "ssh_engine_probe: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(status);
}

static void remote_command(char *out, size_t size, int download, long long total) {
    if (download) snprintf(out, size, "head -c %lld /dev/zero", total);
    else snprintf(out, size, "head -c %lld >/dev/null", total);
}

static long long with_libssh2(const char *host, int port, const char *user, const char *key, int download,
                              long long total, const char *cipher, struct outcome *o) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (fd < 0 || inet_pton(AF_INET, host, &address.sin_addr) != 1) fail(1, "bad address", host);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) fail(1, "connect failed", host);
    if (libssh2_init(0) != 0) fail(1, "libssh2_init failed", NULL);
    o->version = libssh2_version(0);
    LIBSSH2_SESSION *session = libssh2_session_init();
    if (!session) fail(1, "no session", NULL);
    if (libssh2_session_method_pref(session, LIBSSH2_METHOD_CRYPT_CS, cipher) != 0 ||
        libssh2_session_method_pref(session, LIBSSH2_METHOD_CRYPT_SC, cipher) != 0)
        fail(3, "cipher not offered by this libssh2", cipher);
    if (libssh2_session_handshake(session, fd) != 0) fail(1, "handshake failed", NULL);
    snprintf(o->cipher, sizeof o->cipher, "%s", libssh2_session_methods(session, LIBSSH2_METHOD_CRYPT_SC));
    char public_key[1024];
    snprintf(public_key, sizeof public_key, "%s.pub", key);
    if (libssh2_userauth_publickey_fromfile(session, user, public_key, key, NULL) != 0)
        fail(1, "authentication failed", NULL);
    LIBSSH2_CHANNEL *channel = libssh2_channel_open_session(session);
    if (!channel) fail(1, "no channel", NULL);
    char command[128];
    remote_command(command, sizeof command, download, total);
    o->started = monotonic();
    if (libssh2_channel_exec(channel, command) != 0) fail(1, "exec failed", NULL);
    long long moved = 0;
    if (download) {
        for (;;) {
            ssize_t n = libssh2_channel_read(channel, data, CHUNK);
            if (n < 0) fail(1, "read failed", NULL);
            if (n == 0) break;
            moved += n;
        }
    } else {
        while (moved < total) {
            long long left = total - moved;
            ssize_t n = libssh2_channel_write(channel, data, left < CHUNK ? (size_t)left : CHUNK);
            if (n < 0) fail(1, "write failed", NULL);
            moved += n;
        }
        libssh2_channel_send_eof(channel);
        libssh2_channel_wait_eof(channel);
    }
    libssh2_channel_close(channel);
    libssh2_channel_free(channel);
    libssh2_session_disconnect(session, "done");
    libssh2_session_free(session);
    close(fd);
    return moved;
}

static long long with_libssh(const char *host, int port, const char *user, const char *key, int download,
                             long long total, const char *cipher, struct outcome *o) {
    o->version = ssh_version(0);
    ssh_session session = ssh_new();
    int no = 0;
    if (!session) fail(1, "no session", NULL);
    ssh_options_set(session, SSH_OPTIONS_HOST, host);
    ssh_options_set(session, SSH_OPTIONS_PORT, &port);
    ssh_options_set(session, SSH_OPTIONS_USER, user);
    ssh_options_set(session, SSH_OPTIONS_STRICTHOSTKEYCHECK, &no);
    ssh_options_set(session, SSH_OPTIONS_KNOWNHOSTS, "/dev/null");
    if (ssh_options_set(session, SSH_OPTIONS_CIPHERS_C_S, cipher) != SSH_OK ||
        ssh_options_set(session, SSH_OPTIONS_CIPHERS_S_C, cipher) != SSH_OK)
        fail(3, "cipher not offered by this libssh", cipher);
    if (ssh_connect(session) != SSH_OK) fail(1, "connect failed", ssh_get_error(session));
    snprintf(o->cipher, sizeof o->cipher, "%s", ssh_get_cipher_in(session));
    ssh_key private_key;
    if (ssh_pki_import_privkey_file(key, NULL, NULL, NULL, &private_key) != SSH_OK) fail(1, "cannot read key", key);
    if (ssh_userauth_publickey(session, NULL, private_key) != SSH_AUTH_SUCCESS) fail(1, "authentication failed", NULL);
    ssh_key_free(private_key);
    ssh_channel channel = ssh_channel_new(session);
    if (!channel || ssh_channel_open_session(channel) != SSH_OK) fail(1, "no channel", NULL);
    char command[128];
    remote_command(command, sizeof command, download, total);
    o->started = monotonic();
    if (ssh_channel_request_exec(channel, command) != SSH_OK) fail(1, "exec failed", NULL);
    long long moved = 0;
    if (download) {
        for (;;) {
            int n = ssh_channel_read(channel, data, CHUNK, 0);
            if (n < 0) fail(1, "read failed", ssh_get_error(session));
            if (n == 0) break;
            moved += n;
        }
    } else {
        while (moved < total) {
            long long left = total - moved;
            int n = ssh_channel_write(channel, data, left < CHUNK ? (uint32_t)left : CHUNK);
            if (n < 0) fail(1, "write failed", ssh_get_error(session));
            moved += n;
        }
        ssh_channel_send_eof(channel);
        while (!ssh_channel_is_eof(channel) && ssh_channel_read(channel, data, CHUNK, 0) > 0) {
        }
    }
    ssh_channel_close(channel);
    ssh_channel_free(channel);
    ssh_disconnect(session);
    ssh_free(session);
    return moved;
}

int main(int argc, char **argv) {
    if (argc != 9) fail(1, "usage", "ssh_engine_probe libssh2|libssh HOST PORT USER KEY download|upload BYTES CIPHER");
    int download = strcmp(argv[6], "download") == 0;
    long long total = atoll(argv[7]);
    struct outcome o = {.version = "?", .cipher = "?", .started = 0};
    double cpu_before = cpu_seconds();
    long long moved;
    if (strcmp(argv[1], "libssh") == 0)
        moved = with_libssh(argv[2], atoi(argv[3]), argv[4], argv[5], download, total, argv[8], &o);
    else if (strcmp(argv[1], "libssh2") == 0)
        moved = with_libssh2(argv[2], atoi(argv[3]), argv[4], argv[5], download, total, argv[8], &o);
    else
        fail(1, "unknown library", argv[1]);
    double finished = monotonic();
    if (moved != total) fail(1, "short transfer", NULL);
    printf("{\"version\": \"%s\", \"cipher\": \"%s\", \"seconds\": %.6f, \"cpu\": %.6f}\n", o.version, o.cipher,
           finished - o.started, cpu_seconds() - cpu_before);
    return 0;
}
