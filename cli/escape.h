/*
 * escape.h: writing untrusted bytes (lock names, holder descriptions, servers'
 * messages) to a terminal or into JSON. Lock names may hold any byte but NUL, and a
 * holder description is whatever another process stored, so neither can be printed
 * as it is: a newline would break the one-line rule of our errors, an escape
 * sequence could rewrite the user's terminal, a quote would break the JSON.
 *
 * Pure code over stdio; no globals.
 */
#ifndef DLOCK_CLI_ESCAPE_H
#define DLOCK_CLI_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* Length (1 to 4) of the valid UTF-8 sequence at s[0..len), or 0 when s does not
 * start with one (overlong forms, surrogates and code points past U+10FFFF are
 * invalid, as are truncated sequences). len must be > 0. */
size_t cli_utf8_len(const unsigned char *s, size_t len);

/* Write s[0..len) for a terminal: printable ASCII and valid UTF-8 as they are (C1
 * controls U+0080..U+009F aside); every other byte as \xNN. */
void cli_write_safe(FILE *f, const char *s, size_t len);

/* Write s[0..len) as a JSON string literal, quotes included: '"' and '\\' escaped,
 * control characters as \n, \t, ... or \u00NN, DEL as \u007f, valid UTF-8 as it is,
 * and each byte of invalid UTF-8 as \ufffd (JSON text must be UTF-8). */
void cli_write_json_string(FILE *f, const char *s, size_t len);

/* Print "dlock: <message>" as one line on stderr. The message may carry a lock name,
 * a holder's description or a server's words: all of it goes through cli_write_safe,
 * so that no newline or terminal escape gets through. */
void cli_errline(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* DLOCK_CLI_ESCAPE_H */
