/* A program built against an installed libdlock, as its users build theirs: with
 * `pkg-config --cflags --libs dlock` or CMake's find_package(dlock). It takes a lock on
 * the servers named by its argument, checks what the grant says, releases it, and
 * exits 0 only if every step went as the API promises. tests/install/check.sh runs it. */
#include <dlock.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: consumer URLS\n");
        return 64;
    }
    /* The header and the library it runs with are of one version. */
    if (strcmp(dlock_version(), DLOCK_VERSION_STRING) != 0) {
        fprintf(stderr, "consumer: header %s, library %s\n", DLOCK_VERSION_STRING, dlock_version());
        return 1;
    }
    dlock_client *c;
    int rc = dlock_client_new(argv[1], NULL, &c);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "consumer: client: %s (%s)\n", dlock_strerror(rc), dlock_errmsg());
        return 1;
    }
    dlock_opts o = {.ttl_ms = 10000};
    dlock_lock *l;
    rc = dlock_acquire(c, "install-check", &o, &l);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "consumer: acquire: %s (%s)\n", dlock_strerror(rc), dlock_errmsg());
        dlock_client_free(c);
        return 1;
    }
    /* A second owner is refused while the first holds it. */
    dlock_lock *other;
    int busy = dlock_acquire(c, "install-check", &o, &other);
    int ok = busy == DLOCK_ERR_BUSY && dlock_fence(l) > 0 && dlock_remaining_ms(l) > 0;
    printf("consumer: libdlock %s, fence %llu, second owner: %s\n", dlock_version(),
           (unsigned long long)dlock_fence(l), dlock_errname(busy));
    rc = dlock_release(l);
    dlock_client_free(c);
    if (rc != DLOCK_OK || !ok) {
        fprintf(stderr, "consumer: release %s, second owner %s\n", dlock_errname(rc),
                dlock_errname(busy));
        return 1;
    }
    return 0;
}
