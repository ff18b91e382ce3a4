/*
 * Sample 04: a synthesizer in C, built with clang for wasm32-wasi against Debian's wasi-libc.
 *
 * It reads the stdin ResourceList, takes `data.name` of the input bound under `config` (found
 * with a deliberately small scan: real synthesizers in C would use a JSON library), and writes
 * three resources in two readiness groups: a ConfigMap (group 0, with a readiness check),
 * then a Secret and a ServiceAccount (group 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(FILE *in) {
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, in)) > 0) {
        len += n;
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    if (buf) buf[len] = '\0';
    return buf;
}

/* Copies the string value following `"key":` (optional spaces) into out; 0 if absent. */
static int string_after(const char *text, const char *key, char *out, size_t size) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    const char *p = strstr(text, pattern);
    if (!p) return 0;
    p += strlen(pattern);
    while (*p == ' ' || *p == ':') p++;
    if (*p != '"') return 0;
    p++;
    size_t i = 0;
    while (*p && *p != '"' && i + 1 < size) {
        char c = *p++;
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') out[i++] = c;
    }
    out[i] = '\0';
    return i > 0;
}

int main(void) {
    char *input = read_all(stdin);
    char name[64];
    if (!input || !strstr(input, "\"enoki.dev/input-key\":\"config\"")) {
        printf("{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[],"
               "\"results\":[{\"severity\":\"error\",\"message\":\"input \\\"config\\\" is not bound\"}]}\n");
        return 0;
    }
    if (!string_after(input, "name", name, sizeof name)) strcpy(name, "hello");
    /* The first "name" after the data key is the app name we want. */
    const char *data = strstr(input, "\"data\"");
    if (data) string_after(data, "name", name, sizeof name);
    printf("{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":["
           "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"%s-c\",\"annotations\":"
           "{\"enoki.dev/readiness-group\":\"0\",\"enoki.dev/readiness\":\"has(self.data.lang)\"}},"
           "\"data\":{\"lang\":\"c\"}},"
           "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"%s-c\",\"annotations\":"
           "{\"enoki.dev/readiness-group\":\"1\"}},\"stringData\":{\"note\":\"written in C\"}},"
           "{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"%s-c\",\"annotations\":"
           "{\"enoki.dev/readiness-group\":\"1\"}}}"
           "],\"results\":[{\"severity\":\"info\",\"message\":\"built with clang\"}]}\n",
           name, name, name);
    free(input);
    return 0;
}
