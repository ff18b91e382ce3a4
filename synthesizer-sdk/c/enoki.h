/*
 * enoki.h — a header-only helper for enoki synthesizers in C (clang --target=wasm32-wasi
 * against wasi-libc). It covers the I/O of the contract (synthesizer-sdk/CONTRACT.md): read all
 * of stdin, find a string value by key, write JSON strings escaped. The lookup is a small scan
 * of the JSON text, not a parser: it returns the first `"key": "value"` after a position, so
 * narrow the search with a prefix (e.g. the `"functionConfig"` key) and use a real JSON library
 * (compiled for wasm32-wasi) for anything nested or repeated.
 */
#ifndef ENOKI_H
#define ENOKI_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* All of `in` as a NUL-terminated string (caller frees); NULL when out of memory. */
static inline char *enoki_read_all(FILE *in) {
    size_t cap = 65536, len = 0, n;
    char *buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - len - 1, in)) > 0) {
        len += n;
        if (len + 1 >= cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) { free(buf); return NULL; }
            buf = bigger;
            cap *= 2;
        }
    }
    if (buf) buf[len] = '\0';
    return buf;
}

/* Copies the string value of the first `"key": "…"` at or after `from` into `out` (JSON
 * escapes \" \\ \n \t \/ decoded; others kept); returns 1 if found, 0 if not. */
static inline int enoki_string_after(const char *from, const char *key, char *out, size_t size) {
    char pattern[128];
    if (!from || snprintf(pattern, sizeof pattern, "\"%s\"", key) >= (int)sizeof pattern) return 0;
    for (const char *p = strstr(from, pattern); p; p = strstr(p + 1, pattern)) {
        const char *v = p + strlen(pattern);
        while (*v == ' ' || *v == '\n' || *v == '\t' || *v == '\r') v++;
        if (*v != ':') continue;
        v++;
        while (*v == ' ' || *v == '\n' || *v == '\t' || *v == '\r') v++;
        if (*v != '"') continue;
        size_t i = 0;
        for (v++; *v && *v != '"' && i + 1 < size; v++) {
            char c = *v;
            if (c == '\\' && v[1]) {
                v++;
                c = *v == 'n' ? '\n' : *v == 't' ? '\t' : *v;
            }
            out[i++] = c;
        }
        out[i] = '\0';
        return 1;
    }
    return 0;
}

/* Writes `s` as a JSON string literal (quotes included). */
static inline void enoki_write_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '\n') fputs("\\n", out);
        else if (c == '\t') fputs("\\t", out);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

/* Writes an output ResourceList whose only content is an error result (fails the synthesis). */
static inline void enoki_fail(FILE *out, const char *message) {
    fputs("{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[],"
          "\"results\":[{\"severity\":\"error\",\"message\":", out);
    enoki_write_string(out, message);
    fputs("}]}\n", out);
}

#endif /* ENOKI_H */
