// CCFSSH2: libssh2 for the embedded SSH mode (CFAccessSSH), and its own thin shim.
//
// Every symbol below is prefixed CCFSSH2_ and only forwards a libssh2 convenience name that is a
// function-like macro over an *_ex function, which Swift cannot import. No logic lives here.
#ifndef CCFSSH2_SHIM_H
#define CCFSSH2_SHIM_H

#include <libssh2.h>
#include <sys/socket.h>
#include <poll.h>

// libssh2_session_init() is libssh2_session_init_ex(NULL, NULL, NULL, NULL).
static inline LIBSSH2_SESSION *CCFSSH2_session_init(void) { return libssh2_session_init(); }

// libssh2_channel_open_session(s): the "session" channel type with libssh2's default windows.
static inline LIBSSH2_CHANNEL *CCFSSH2_channel_open_session(LIBSSH2_SESSION *s) {
    return libssh2_channel_open_session(s);
}

#endif
