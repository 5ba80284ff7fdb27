// Intentionally empty: CCFShim is header-only (static inline forwarders).
#include "CCFShim.h"
