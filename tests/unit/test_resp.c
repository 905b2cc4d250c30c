/*
 * test_resp.c: dlockd's request parser (service/resp.c): both forms, every limit
 * refused at its header, incomplete input with its hint, and the same commands out of
 * any cut of a stream. Inputs lie against a guard page, so that a read one byte past
 * the end faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "resp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const resp_limits lim = {.max_args = 8, .max_bulk = 16, .max_inline = 32};
static resp_arg argv[8];

/* A copy of s ending exactly at a page that cannot be read. */
static const char *guarded(const char *s, size_t n)
{
    static char *base;
    static size_t page;
    if (base == NULL) {
        page = (size_t)sysconf(_SC_PAGESIZE);
        base = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(base != MAP_FAILED);
        assert_int_equal(mprotect(base + 2 * page, page, PROT_NONE), 0);
    }
    assert_true(n <= 2 * page);
    char *p = base + 2 * page - n;
    memcpy(p, s, n);
    return p;
}

static int parse(const char *s, size_t n, size_t *argc, size_t *used, const char **err)
{
    return resp_parse(guarded(s, n), n, &lim, argv, argc, used, err);
}

static void expect_command(const char *s, size_t used_want, size_t argc_want, ...)
{
    size_t argc, used;
    const char *err;
    int rc = parse(s, strlen(s), &argc, &used, &err);
    if (rc != RESP_COMMAND)
        fail_msg("'%s': rc %d (%s)", s, rc, err ? err : "");
    assert_int_equal(used, used_want);
    assert_int_equal(argc, argc_want);
    va_list ap;
    va_start(ap, argc_want);
    for (size_t i = 0; i < argc; i++) {
        const char *want = va_arg(ap, const char *);
        assert_int_equal(argv[i].len, strlen(want));
        assert_memory_equal(argv[i].p, want, argv[i].len);
    }
    va_end(ap);
}

static void expect_error(const char *s, size_t n, const char *msg)
{
    size_t argc, used;
    const char *err = NULL;
    int rc = parse(s, n, &argc, &used, &err);
    if (rc != RESP_ERROR)
        fail_msg("'%.*s': rc %d, expected an error", (int)n, s, rc);
    assert_non_null(err);
    assert_non_null(strstr(err, msg));
}

/* Inputs the parser must refuse, each with what its message says. */
typedef struct refusal {
    const char *in;
    const char *msg;
} refusal;

static void expect_errors(const refusal *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect_error(list[i].in, strlen(list[i].in), list[i].msg);
}

#define EXPECT_ERRORS(list) expect_errors((list), sizeof(list) / sizeof(list)[0])

static void expect_incomplete(const char *s, size_t need)
{
    size_t argc, used;
    const char *err;
    int rc = parse(s, strlen(s), &argc, &used, &err);
    if (rc != RESP_INCOMPLETE)
        fail_msg("'%s': rc %d, expected incomplete", s, rc);
    assert_int_equal(used, need);
    assert_true(used > strlen(s));
}

static void test_multibulk(void **state)
{
    (void)state;
    expect_command("*1\r\n$4\r\nPING\r\n", 14, 1, "PING");
    expect_command("*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", 20, 2, "ECHO", "");
    expect_command("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n*1", 30, 3, "SET", "k", "a\r\nb");
    /* Empty commands are skipped by the caller. */
    expect_command("*0\r\n", 4, 0);
    expect_command("*-1\r\n", 5, 0);
    /* NUL bytes inside an argument are data. */
    size_t argc, used;
    const char *err;
    assert_int_equal(parse("*1\r\n$3\r\na\0b\r\n", 13, &argc, &used, &err), RESP_COMMAND);
    assert_int_equal(argv[0].len, 3);
}

static void test_inline(void **state)
{
    (void)state;
    expect_command("PING\r\n", 6, 1, "PING");
    expect_command("PING\n", 5, 1, "PING");
    expect_command("  LOCK \t a  TTL 100 \r\nX", 22, 4, "LOCK", "a", "TTL", "100");
    expect_command("\r\n", 2, 0);
    expect_command("\n", 1, 0);
}

static void test_limits(void **state)
{
    (void)state;
    /* Refused at the header, before the data it announces. */
    static const refusal over[] = {
        {"*9\r\n", "too many arguments"},
        {"*2147483647\r\n", "too many arguments"},
        {"*99999999999999999999\r\n", "too many arguments"},
        {"*1\r\n$17\r\n", "longer than the limit"},
        {"*1\r\n$1073741824\r\n", "longer than the limit"},
        {"a b c d e f g h i\n", "too many arguments"},
    };
    EXPECT_ERRORS(over);
    char line[40];
    memset(line, 'x', sizeof line);
    expect_error(line, 32, "inline command longer");
    /* One short of the limits is fine. */
    expect_command("a b c d e f g h\n", 16, 8, "a", "b", "c", "d", "e", "f", "g", "h");
    expect_command("*1\r\n$16\r\n0123456789abcdef\r\n", 27, 1, "0123456789abcdef");
    memset(line, 'x', 31);
    line[31] = '\n';
    line[32] = '\0';
    expect_command(line, 32, 1, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
}

static void test_malformed(void **state)
{
    (void)state;
    static const refusal malformed[] = {
        {"*x\r\n", "invalid multibulk length"},
        {"*\r\n", "invalid multibulk length"},
        {"*1\n", "invalid multibulk length"},
        {"*1\rx", "invalid multibulk length"},
        {"*1\r\n+OK\r\n", "expected '$'"},
        {"*1\r\n$-1\r\n", "invalid bulk length"},
        {"*1\r\n$1x\r\n", "invalid bulk length"},
        {"*1\r\n$1\r\nabc", "not followed by CRLF"},
        /* A bad byte in a header is refused at once, not when the line would be too long. */
        {"*1x", "invalid multibulk length"},
        {"*1\r\n$ ", "invalid bulk length"},
    };
    EXPECT_ERRORS(malformed);
    /* A header that never ends. */
    char hdr[40] = "*";
    memset(hdr + 1, '1', 38);
    expect_error(hdr, 39, "invalid multibulk length");
}

static void test_incomplete(void **state)
{
    (void)state;
    expect_incomplete("*", 2);
    expect_incomplete("*2\r", 4);
    expect_incomplete("*2\r\n", 5);
    expect_incomplete("*2\r\n$4", 7);
    /* Inside a bulk: the hint is the whole argument with its CRLF, so a long argument
     * arriving in pieces is not rescanned for each. */
    expect_incomplete("*2\r\n$4\r\nEC", 14);
    expect_incomplete("*2\r\n$4\r\nECHO\r\n$10\r\nabc", 31);
    expect_incomplete("PIN", 4);
}

/* Any cut of a stream gives the same commands as the whole: the parser keeps no state,
 * and its hints never skip a command. */
static void test_stream_cuts(void **state)
{
    (void)state;
    static const char stream[] = "*1\r\n$4\r\nPING\r\nECHO a\r\n*2\r\n$4\r\nECHO\r\n$3\r\nx y\r\n"
                                 "*0\r\n\n*3\r\n$1\r\na\r\n$0\r\n\r\n$2\r\nbc\r\n";
    size_t total = sizeof stream - 1;
    char whole[512] = "";
    for (size_t cut = 1; cut <= total; cut++) {
        char got[512] = "";
        size_t have = 0, pos = 0, need = 0;
        while (have < total) {
            size_t add = cut < total - have ? cut : total - have;
            have += add;
            while (pos < have && have >= need) {
                size_t argc, used;
                const char *err;
                int rc = resp_parse(stream + pos, have - pos, &lim, argv, &argc, &used, &err);
                assert_int_not_equal(rc, RESP_ERROR);
                if (rc == RESP_INCOMPLETE) {
                    need = pos + used;
                    break;
                }
                need = 0;
                pos += used;
                for (size_t i = 0; i < argc; i++)
                    snprintf(got + strlen(got), sizeof got - strlen(got), "%.*s|", (int)argv[i].len,
                             argv[i].p);
                strcat(got, ";");
            }
        }
        assert_int_equal(pos, total);
        if (cut == 1)
            snprintf(whole, sizeof whole, "%s", got);
        else
            assert_string_equal(got, whole);
    }
    assert_string_equal(whole, "PING|;ECHO|a|;ECHO|x y|;;;a||bc|;");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multibulk),  cmocka_unit_test(test_inline),
        cmocka_unit_test(test_limits),     cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_incomplete), cmocka_unit_test(test_stream_cuts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
