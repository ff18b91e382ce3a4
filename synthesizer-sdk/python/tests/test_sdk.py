"""enoki_sdk under CPython: the contract's lookups and results, and sample 09's synthesize
function over its fixture (the same code componentize-py builds into the component).

Run: python3 -m unittest discover -s synthesizer-sdk/python/tests (hack/test.sh does)."""

import io
import json
import pathlib
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "synthesizer-sdk/python"), str(ROOT / "samples/09-python")]

import app  # noqa: E402  (samples/09-python/app.py)
import enoki_sdk  # noqa: E402


def fixture():
    return json.loads((ROOT / "samples/09-python/fixtures/input.json").read_text())


class SdkTest(unittest.TestCase):
    def test_inputs_skip_observed_outputs_and_missing_required_inputs_fail(self):
        doc = fixture()
        observed = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "old", "annotations": {"enoki.dev/input-key": "config", "enoki.dev/observed": "true"}}}
        doc["items"].insert(0, observed)
        rl = enoki_sdk.ResourceList(doc)
        self.assertEqual(rl.input("config")["metadata"]["name"], "shop")
        self.assertEqual([o["metadata"]["name"] for o in rl.observed()], ["old"])
        self.assertIsNone(rl.input("absent", optional=True))
        self.assertEqual(rl.composition["name"], "shop")
        with self.assertRaisesRegex(enoki_sdk.SynthesisError, "'absent' is missing"):
            rl.input("absent")

    def test_helpers_set_enoki_annotations(self):
        o = enoki_sdk.resource("v1", "ConfigMap", "x", data={"a": "b"})
        enoki_sdk.readiness_group(o, 2)
        enoki_sdk.readiness(o, "has(self.data)", name="data")
        self.assertEqual(o["metadata"]["annotations"], {
            "enoki.dev/readiness-group": "2", "enoki.dev/readiness-data": "has(self.data)"})
        self.assertEqual(o["data"], {"a": "b"})

    def test_sample_09_renders_its_fixture(self):
        out = enoki_sdk.render(app.synthesize, fixture())
        kinds = [(o["kind"], o["metadata"]["name"]) for o in out["items"]]
        self.assertEqual(kinds, [("Deployment", "shop"), ("Service", "shop"), ("HorizontalPodAutoscaler", "shop")])
        self.assertEqual(out["items"][0]["spec"]["replicas"], 2)
        self.assertEqual(out["items"][2]["spec"]["maxReplicas"], 5)
        self.assertEqual(out["results"], [])

    def test_bad_input_is_an_error_result_naming_the_field(self):
        doc = fixture()
        doc["items"][0]["data"]["maxReplicas"] = "1"
        out = enoki_sdk.render(app.synthesize, doc)
        self.assertEqual(out["items"], [])
        self.assertEqual(out["results"][0]["severity"], "error")
        self.assertIn("data.maxReplicas (1) is below minReplicas (2)", out["results"][0]["message"])

    def test_main_reads_stdin_and_writes_one_resource_list(self):
        stdout = io.StringIO()
        enoki_sdk.main(app.synthesize, stdin=io.StringIO(json.dumps(fixture())), stdout=stdout)
        out = json.loads(stdout.getvalue())
        self.assertEqual(out["kind"], "ResourceList")
        self.assertEqual(len(out["items"]), 3)

    def test_stdin_that_is_not_a_resource_list_fails_the_synthesis(self):
        stdout = io.StringIO()
        enoki_sdk.main(app.synthesize, stdin=io.StringIO("[1, 2]"), stdout=stdout)
        out = json.loads(stdout.getvalue())
        self.assertEqual(out["results"][0]["message"], "stdin is not a ResourceList")


if __name__ == "__main__":
    unittest.main()
