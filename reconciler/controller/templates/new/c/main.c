/*
 * {{name}}: an enoki synthesizer in C (clang --target=wasm32-wasi, a WASI preview1 module).
 * Reads config.data.greeting (default "hello") and emits <composition>-greeting. enoki.h's
 * lookup is a small scan of the JSON text (see its header comment).
 */
#include <enoki.h>

int main(void) {
    char *in = enoki_read_all(stdin);
    if (!in) {
        enoki_fail(stdout, "cannot read stdin");
        return 0;
    }
    char greeting[256] = "hello", name[254] = "";
    enoki_string_after(in, "greeting", greeting, sizeof greeting);
    if (!enoki_string_after(strstr(in, "\"composition\""), "name", name, sizeof name)) {
        enoki_fail(stdout, "functionConfig.composition.name is missing");
        free(in);
        return 0;
    }
    char message[300];
    snprintf(message, sizeof message, "%s, world", greeting);
    char cm_name[300];
    snprintf(cm_name, sizeof cm_name, "%s-greeting", name);

    fputs("{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[", stdout);
    fputs("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":", stdout);
    enoki_write_string(stdout, cm_name);
    fputs(",\"labels\":{\"app.kubernetes.io/name\":", stdout);
    enoki_write_string(stdout, name);
    fputs("},\"annotations\":{\"enoki.dev/readiness-group\":\"0\","
          "\"enoki.dev/readiness\":\"has(self.data.message)\"}},\"data\":{\"message\":", stdout);
    enoki_write_string(stdout, message);
    fputs("}}]}\n", stdout);
    free(in);
    return 0;
}
