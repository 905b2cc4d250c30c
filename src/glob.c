/*
 * glob.c: matching a name against a glob (dlock_list's PATTERN), in time bounded by the
 * product of their lengths.
 *
 * fnmatch(3) and Redis's stringmatchlen backtrack over every '*', so a pattern such as
 * "*a*a*a*a*a*b" against a long name of a's takes time exponential in the stars; a
 * listing runs the pattern of whoever asks (dlockd's LOCKS) over every held name, so
 * that would let one request hold a thread for hours. Here a '*' that fails is retried
 * only from the last '*' seen: a later star can absorb whatever an earlier one would
 * have, so one point of return is enough, and each (pattern, name) position pair is met
 * at most once.
 *
 * The syntax is the shell's and SCAN's: '*' any bytes, '?' one byte, "[abc]", "[a-z]",
 * "[!x]" or "[^x]" one byte of (or not of) a set, and '\' quotes the byte after it.
 * Bytes, not characters: a name is any bytes.
 */
#include "base.h"

/* Whether b is in the set that starts after '[' at *p (within end); *p is left past its
 * ']'. A set without its ']' is taken as the byte '[' itself (returned in *literal). */
static bool in_set(const char **p, const char *end, unsigned char b, bool *literal)
{
    const char *q = *p;
    bool negate = q < end && (*q == '!' || *q == '^');
    if (negate)
        q++;
    bool found = false, first = true;
    while (q < end && (*q != ']' || first)) {
        first = false;
        unsigned char lo = (unsigned char)*q++;
        if (lo == '\\' && q < end)
            lo = (unsigned char)*q++;
        unsigned char hi = lo;
        if (q + 1 < end && *q == '-' && q[1] != ']') {
            q++;
            hi = (unsigned char)*q++;
            if (hi == '\\' && q < end)
                hi = (unsigned char)*q++;
        }
        if (lo > hi) { /* "[z-a]" is "[a-z]", as Redis takes it */
            unsigned char t = lo;
            lo = hi;
            hi = t;
        }
        if (lo <= b && b <= hi)
            found = true;
    }
    if (q >= end) {
        *literal = true;
        return b == '[';
    }
    *literal = false;
    *p = q + 1;
    return found != negate;
}

bool dlock__glob_match(const char *pat, size_t plen, const char *str, size_t slen)
{
    const char *p = pat, *pend = pat + plen, *s = str, *send = str + slen;
    const char *star = NULL, *star_s = NULL; /* the last '*', and where it matched up to */
    while (s < send) {
        if (p < pend && *p == '*') {
            while (p < pend && *p == '*')
                p++;
            if (p == pend)
                return true; /* a trailing star takes the rest */
            star = p;
            star_s = s;
            continue;
        }
        bool ok = false;
        const char *next = p + 1;
        if (p < pend) {
            unsigned char b = (unsigned char)*s;
            if (*p == '?') {
                ok = true;
            } else if (*p == '[') {
                bool literal;
                const char *q = p + 1;
                ok = in_set(&q, pend, b, &literal);
                next = literal ? p + 1 : q;
            } else if (*p == '\\' && p + 1 < pend) {
                ok = (unsigned char)p[1] == b;
                next = p + 2;
            } else {
                ok = (unsigned char)*p == b;
            }
        }
        if (ok) {
            p = next;
            s++;
        } else if (star != NULL) {
            p = star; /* the last star takes one byte more */
            s = ++star_s;
        } else {
            return false;
        }
    }
    while (p < pend && *p == '*')
        p++;
    return p == pend;
}
