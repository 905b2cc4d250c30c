/*
 * test_escape.c: untrusted bytes written by the command line (cli/escape.c): to a
 * terminal (one line, no escape sequences) and as JSON strings (valid JSON, valid
 * UTF-8, whatever the holder stored).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

/* Run a writer over len bytes of s into a string (open_memstream); caller frees. */
static char *capture(void (*writer)(FILE *, const char *, size_t), const char *s, size_t len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    assert_non_null(f);
    writer(f, s, len);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static void expect_json(const char *s, size_t len, const char *want)
{
    char *got = capture(cli_write_json_string, s, len);
    if (strcmp(got, want) != 0)
        fail_msg("json: got %s, want %s", got, want);
    free(got);
}

static void expect_safe(const char *s, size_t len, const char *want)
{
    char *got = capture(cli_write_safe, s, len);
    if (strcmp(got, want) != 0)
        fail_msg("safe: got %s, want %s", got, want);
    free(got);
}

#define JSON(lit, want) expect_json(lit, sizeof lit - 1, want)
#define SAFE(lit, want) expect_safe(lit, sizeof lit - 1, want)

static void test_utf8_len(void **state)
{
    (void)state;
    const unsigned char ok2[] = {0xc3, 0xa9}, ok3[] = {0xe2, 0x82, 0xac},
                        ok4[] = {0xf0, 0x9f, 0x94, 0x92}, max[] = {0xf4, 0x8f, 0xbf, 0xbf};
    assert_int_equal(cli_utf8_len((const unsigned char *)"a", 1), 1);
    assert_int_equal(cli_utf8_len(ok2, 2), 2);
    assert_int_equal(cli_utf8_len(ok3, 3), 3);
    assert_int_equal(cli_utf8_len(ok4, 4), 4);
    assert_int_equal(cli_utf8_len(max, 4), 4); /* U+10FFFF */
    /* Truncated sequences. */
    assert_int_equal(cli_utf8_len(ok2, 1), 0);
    assert_int_equal(cli_utf8_len(ok3, 2), 0);
    assert_int_equal(cli_utf8_len(ok4, 3), 0);
    /* Lone continuation byte, overlong forms, surrogates, past U+10FFFF, 0xff. */
    const unsigned char cont[] = {0x80}, over2[] = {0xc0, 0xaf}, over3[] = {0xe0, 0x80, 0xaf},
                        over4[] = {0xf0, 0x80, 0x80, 0xaf}, surr[] = {0xed, 0xa0, 0x80},
                        big[] = {0xf4, 0x90, 0x80, 0x80}, ff[] = {0xff}, badcont[] = {0xc3, 0x28};
    assert_int_equal(cli_utf8_len(cont, 1), 0);
    assert_int_equal(cli_utf8_len(over2, 2), 0);
    assert_int_equal(cli_utf8_len(over3, 3), 0);
    assert_int_equal(cli_utf8_len(over4, 4), 0);
    assert_int_equal(cli_utf8_len(surr, 3), 0);
    assert_int_equal(cli_utf8_len(big, 4), 0);
    assert_int_equal(cli_utf8_len(ff, 1), 0);
    assert_int_equal(cli_utf8_len(badcont, 2), 0);
}

static void test_json_plain(void **state)
{
    (void)state;
    JSON("", "\"\"");
    JSON("host:1234 nightly backup", "\"host:1234 nightly backup\"");
    JSON("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92",
         "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92\"");
    JSON("a/b", "\"a/b\""); /* '/' may stay as it is */
}

static void test_json_escapes(void **state)
{
    (void)state;
    JSON("say \"hi\"", "\"say \\\"hi\\\"\"");
    JSON("C:\\dir\\", "\"C:\\\\dir\\\\\"");
    JSON("a\nb\rc\td\be\ff", "\"a\\nb\\rc\\td\\be\\ff\"");
    JSON("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
    JSON("\x1b[2J", "\"\\u001b[2J\"");
    /* A NUL inside the given length is escaped too (lengths, not C strings). */
    expect_json("a\0b", 3, "\"a\\u0000b\"");
}

static void test_json_invalid_utf8(void **state)
{
    (void)state;
    JSON("\xff", "\"\\ufffd\"");
    JSON("a\xc3", "\"a\\ufffd\"");                     /* truncated at the end */
    JSON("\xc3(", "\"\\ufffd(\"");                     /* bad continuation */
    JSON("\xc0\xaf", "\"\\ufffd\\ufffd\"");            /* overlong '/' */
    JSON("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""); /* a surrogate */
    JSON("\xe2\x82", "\"\\ufffd\\ufffd\"");
}

static void test_safe(void **state)
{
    (void)state;
    SAFE("", "");
    SAFE("job-1: held by host:42 \"x\" \\y", "job-1: held by host:42 \"x\" \\y");
    SAFE("caf\xc3\xa9 \xf0\x9f\x94\x92", "caf\xc3\xa9 \xf0\x9f\x94\x92");
    SAFE("two\nlines", "two\\x0alines");
    SAFE("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07");
    SAFE("\r\t\x7f", "\\x0d\\x09\\x7f");
    SAFE("\xff\xfe", "\\xff\\xfe");
    SAFE("\xc2\x9b"
         "31m",
         "\\xc2\\x9b31m");        /* C1 CSI */
    SAFE("\xc2\xa0", "\xc2\xa0"); /* U+00A0 is printable */
    expect_safe("a\0b", 3, "a\\x00b");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_len),     cmocka_unit_test(test_json_plain),
        cmocka_unit_test(test_json_escapes), cmocka_unit_test(test_json_invalid_utf8),
        cmocka_unit_test(test_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
