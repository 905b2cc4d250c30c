/*
 * itest_files.c: the integration tests' files and directories (itest.h): a temporary
 * directory of a test's own and its removal, paths in it, a file's text, and the
 * directory of local locks (file://) a test file's group shares.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int it_tmpdir(char *dir, size_t len, const char *prefix)
{
    const char *base = getenv("DLOCK_TEST_TMP");
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    mkdir(base, 0755); /* may exist */
    snprintf(dir, len, "%.200s/%s.XXXXXX", base, prefix);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "mkdtemp %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int it_tmpdir_remove(const char *dir)
{
    if (getenv("DLOCK_TEST_KEEP") != NULL)
        return 0;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
        return -1;
    }
    return 0;
}

char it_local_dir[320];
char it_local_url[340];

int it_local_setup(void **state)
{
    (void)state;
    if (it_tmpdir(it_local_dir, sizeof it_local_dir, program_invocation_short_name) != 0)
        return -1;
    snprintf(it_local_url, sizeof it_local_url, "file://%s", it_local_dir);
    return 0;
}

int it_local_teardown(void **state)
{
    (void)state;
    it_tmpdir_remove(it_local_dir);
    return 0;
}

int it_srv_local_setup(void **state)
{
    return it_srv_setup(state) != 0 ? -1 : it_local_setup(state);
}

int it_srv_local_teardown(void **state)
{
    it_local_teardown(state);
    return it_srv_teardown(state);
}

const char *it_path(const char *dir, const char *name)
{
    static char ring[8][600];
    static int next;
    char *p = ring[next++ % 8];
    snprintf(p, sizeof ring[0], "%s/%s", dir, name);
    return p;
}

char *it_slurp(const char *file)
{
    char *buf = calloc(1, 65536);
    assert_non_null(buf);
    FILE *f = fopen(file, "r");
    if (f != NULL) {
        buf[fread(buf, 1, 65535, f)] = '\0';
        fclose(f);
    }
    return buf;
}
