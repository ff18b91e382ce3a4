//! The objects of the call-sequence tier: a Synthesizer whose module (a WASI module that
//! emits one ConfigMap) is in a ConfigMap, and Composition `team/app` bound to it.

use serde_json::json;

use super::super::fake_api::FakeApi;

pub(super) const COMPOSITION: &str = "/apis/enoki.dev/v1alpha1/namespaces/team/compositions/app";
pub(super) const MODULE: &str = "/api/v1/namespaces/enoki-system/configmaps/module";
pub(super) const OUTPUT: &str = "/api/v1/namespaces/team/configmaps/out";

/// A WASI module that drains stdin and emits one ConfigMap, `out` with `k: v`.
const EMIT_ONE: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"out\"},\"data\":{\"k\":\"v\"}}]}")
  (func (export "_start")
    (block $done
      (loop $read
        (i32.store (i32.const 0) (i32.const 4096))
        (i32.store (i32.const 4) (i32.const 60000))
        (br_if $done (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
        (br_if $read (i32.load (i32.const 8)))))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 154))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// The fake API holding the module ConfigMap, a Synthesizer of a name of this test's own
/// (`synth-<n>`, recorded as `synth`: a module fetch is one per Synthesizer name in the
/// process) and Composition `team/app`; and the controller's client of it.
pub(super) fn world_parts() -> (FakeApi, kube::Client) {
    static TESTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let synth = format!(
        "synth-{}",
        TESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let (fake, client) = FakeApi::start();
    let wasm = wat::parse_str(EMIT_ONE).expect("module");
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(wasm);
    fake.put(
        MODULE,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "module", "namespace": "enoki-system"},
            "binaryData": {"module.wasm": encoded}}),
    );
    fake.put(
        &format!("/apis/enoki.dev/v1alpha1/synthesizers/{synth}"),
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
            "metadata": {"name": synth},
            "spec": {"module": {"configMap":
                {"namespace": "enoki-system", "name": "module", "key": "module.wasm"}}}}),
    );
    fake.put(
        COMPOSITION,
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": "app", "namespace": "team"},
            "spec": {"synthesizer": {"name": synth}}}),
    );
    (fake, client)
}
