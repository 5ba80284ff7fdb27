#include <libssh2.h>
