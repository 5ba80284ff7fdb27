// CCFLibSSH: libssh (libssh-4) for the embedded SSH mode (CFAccessSSH). Headers only; no logic.
// server.h declares ssh_send_keepalive, which a client needs too (OpenSSH's ServerAliveInterval).
#ifndef CCFLIBSSH_SHIM_H
#define CCFLIBSSH_SHIM_H

#include <libssh/libssh.h>
#include <libssh/callbacks.h>
#include <libssh/server.h>

#endif
