/*
 * fuzz_resp.c: dlockd's request parser (service/resp.c), fed what a client sends.
 *
 * The input is a client's whole stream. It is parsed twice, as dlockd's connection
 * loop does: once whole, and once arriving in pieces whose sizes come from the
 * input's first byte (1 to 64 bytes at a time), waiting each time for the length the
 * parser's hint asked for. What must hold:
 *   - both give the same commands, the same arguments, and the same verdict at the end
 *     (an error at the same offset, or the same incomplete tail): the hint never skips
 *     a command and the parser keeps no state;
 *   - every argument lies inside the bytes its command took, in order, within the
 *     limits (arguments, bulk length, inline line length);
 *   - a command takes at least one byte and at most what it was given; an incomplete
 *     one asks for more than it has; an error has a message.
 */
#include "resp.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NDEBUG
#error "the fuzz targets check with assert(): build them without NDEBUG"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Small limits, so that the fuzzer reaches each of them. */
static const resp_limits lim = {.max_args = 16, .max_bulk = 64, .max_inline = 128};

/* A digest of what one parse produced, to compare the two ways. */
typedef struct outcome {
    uint64_t hash;
    size_t commands;
    size_t end; /* offset where parsing stopped */
    int last;   /* RESP_ERROR or RESP_INCOMPLETE (the stream always ends in one) */
} outcome;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211u;
    return h;
}

static void check_command(const char *buf, size_t avail, const resp_arg *argv, size_t argc,
                          size_t used)
{
    assert(used >= 1 && used <= avail);
    assert(argc <= lim.max_args);
    const char *floor = buf;
    for (size_t i = 0; i < argc; i++) {
        assert(argv[i].p >= floor);
        assert(argv[i].p + argv[i].len <= buf + used);
        if (buf[0] == '*')
            assert(argv[i].len <= lim.max_bulk);
        else
            assert(argv[i].len >= 1 && argv[i].len < lim.max_inline);
        floor = argv[i].p + argv[i].len;
    }
    if (buf[0] != '*')
        assert(used <= lim.max_inline);
}

/* Parse data[0..size), letting the bytes in `step` at a time (0: all at once). */
static outcome run(const char *data, size_t size, size_t step)
{
    static resp_arg argv[16];
    outcome o = {.hash = 14695981039346656037u};
    size_t have = step ? 0 : size, pos = 0, need = 0;
    for (;;) {
        if (have < size && (have < need || pos == have)) {
            have += step;
            if (have > size)
                have = size;
            continue;
        }
        size_t argc, used;
        const char *err;
        int rc = resp_parse(data + pos, have - pos, &lim, argv, &argc, &used, &err);
        if (rc == RESP_ERROR) {
            assert(err != NULL && err[0] != '\0');
            /* The verdict must not depend on how many bytes came after the error. */
            o.last = rc;
            o.end = pos;
            o.hash = mix(o.hash, err, strlen(err));
            return o;
        }
        if (rc == RESP_INCOMPLETE) {
            assert(used > have - pos);
            if (have == size) {
                o.last = rc;
                o.end = pos;
                return o;
            }
            need = pos + used;
            continue;
        }
        assert(rc == RESP_COMMAND);
        check_command(data + pos, have - pos, argv, argc, used);
        o.commands++;
        o.hash = mix(o.hash, &argc, sizeof argc);
        for (size_t i = 0; i < argc; i++) {
            o.hash = mix(o.hash, &argv[i].len, sizeof argv[i].len);
            o.hash = mix(o.hash, argv[i].p, argv[i].len);
        }
        pos += used;
        need = 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = (size_t)(data[0] % 64) + 1;
    /* The stream in a buffer of its own size, so that ASan catches a read past it. */
    char *buf = malloc(size - 1 ? size - 1 : 1);
    assert(buf != NULL);
    memcpy(buf, data + 1, size - 1);
    outcome whole = run(buf, size - 1, 0);
    outcome pieces = run(buf, size - 1, step);
    assert(whole.commands == pieces.commands);
    assert(whole.hash == pieces.hash);
    assert(whole.end == pieces.end);
    assert(whole.last == pieces.last);
    free(buf);
    return 0;
}
