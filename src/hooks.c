/*
 * hooks.c: the test hooks' state (hooks.h). Compiled only into the dlock_hooked test
 * library, never into libdlock.
 */
#include "base.h"

dlock__hooks dlock__test_hooks;
