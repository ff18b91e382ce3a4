"""{{name}}: an enoki synthesizer in Python, built into a wasi:cli/command component by
componentize-py. Reads config.data.greeting (default "hello") and emits <composition>-greeting.
`synthesize` is plain Python: import it and test it under CPython too."""

from enoki_sdk import label, main, readiness, readiness_group, resource


def synthesize(rl):
    cfg = rl.input("config")
    greeting = (cfg.get("data") or {}).get("greeting", "hello")
    name = rl.composition.get("name", "")
    cm = resource("v1", "ConfigMap", f"{name}-greeting", data={"message": f"{greeting}, world"})
    label(cm, "app.kubernetes.io/name", name)
    readiness_group(cm, 0)
    readiness(cm, "has(self.data.message)")
    return [cm]


class Run:
    """The wasi:cli/run export componentize-py wires to the component's entry point."""

    def run(self) -> None:
        main(synthesize)
