/*
 * escape.c: untrusted bytes to a terminal or to JSON (see escape.h for why).
 */
#include "escape.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

size_t cli_utf8_len(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    /* Lead byte: the sequence length, and the smallest code point it may encode
     * (anything below is an overlong form, a classic way to smuggle '/' or '"'). */
    size_t n;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1fu;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0fu;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07u;
        min = 0x10000;
    } else {
        return 0; /* a continuation byte, 0xc0/0xc1 (always overlong) or past 0xf4 */
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0u) != 0x80u)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void cli_write_safe(FILE *f, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (u[i] >= 0x20 && u[i] < 0x7f) {
            fputc(u[i], f);
            i++;
            continue;
        }
        size_t n = u[i] >= 0x80 ? cli_utf8_len(u + i, len - i) : 0;
        /* U+0080..U+009F (0xc2 0x80..0x9f) are C1 controls: some terminals obey
         * 0xc2 0x9b as CSI, so they are escaped like their ASCII cousins. */
        if (n > 0 && !(n == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0)) {
            fwrite(u + i, 1, n, f);
            i += n;
        } else {
            fprintf(f, "\\x%02x", u[i]);
            i++;
        }
    }
}

/* The characters JSON escapes with a backslash and a letter, and those letters: the
 * two that would end or break a string, and the short forms JSON has for control
 * characters (RFC 8259, section 7). Other controls take the \u form. */
static const char json_escaped[] = "\"\\\b\f\n\r\t";
static const char json_escape_letters[] = "\"\\bfnrt";

void cli_write_json_string(FILE *f, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    size_t i = 0;
    while (i < len) {
        unsigned char c = u[i];
        const char *named = c != '\0' ? strchr(json_escaped, c) : NULL;
        if (named != NULL) {
            fputc('\\', f);
            fputc(json_escape_letters[named - json_escaped], f);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            fputc(c, f);
            i++;
        } else {
            size_t n = cli_utf8_len(u + i, len - i);
            if (n > 0) {
                fwrite(u + i, 1, n, f);
                i += n;
            } else {
                fputs("\\ufffd", f);
                i++;
            }
        }
    }
    fputc('"', f);
}

void cli_errline(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    fputs("dlock: ", stderr);
    cli_write_safe(stderr, buf, len);
    fputc('\n', stderr);
}
