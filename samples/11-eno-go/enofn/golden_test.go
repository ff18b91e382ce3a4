package enofn

import (
	"encoding/json"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// enoShaped is how Eno's SDK decodes stdin (its krm ResourceList): every item and the
// functionConfig are unstructured objects, which refuse JSON without apiVersion/kind.
type enoShaped struct {
	APIVersion     string                       `json:"apiVersion"`
	Kind           string                       `json:"kind"`
	Items          []*unstructured.Unstructured `json:"items"`
	FunctionConfig *unstructured.Unstructured   `json:"functionConfig"`
}

// testdata/stdin.json is written by enoki's own test of the stdin it sends
// (reconciler/controller/src/synthesis.rs).
func TestEnokiStdinDecodesAsEnosSDKDecodesIt(t *testing.T) {
	raw, err := os.ReadFile("../testdata/stdin.json")
	if err != nil {
		t.Fatal(err)
	}
	var rl enoShaped
	if err := json.Unmarshal(raw, &rl); err != nil {
		t.Fatalf("Eno's SDK would refuse enoki's stdin: %v", err)
	}
	if rl.Kind != "ResourceList" || len(rl.Items) != 1 {
		t.Fatalf("unexpected list: %+v", rl)
	}
	if got := rl.Items[0].GetAnnotations()["eno.azure.io/input-key"]; got != "config" {
		t.Fatalf("input key: %q", got)
	}
	refs, found, _ := unstructured.NestedStringSlice(rl.FunctionConfig.Object, "optionalRefs")
	if !found || len(refs) != 1 || refs[0] != "extra" {
		t.Fatalf("optionalRefs: %v %v", refs, found)
	}
}

func TestTypedInputsAndOptionalRefs(t *testing.T) {
	type in struct {
		Config *struct {
			Data map[string]string `json:"data"`
		} `eno_key:"config"`
		Extra *struct{} `eno_key:"extra"`
	}
	f, err := os.Open("../testdata/stdin.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seen in
	out, err := Run(f, func(i in) ([]Object, error) { seen = i; return nil, nil })
	if err != nil {
		t.Fatalf("%v %+v", err, out.Results)
	}
	if seen.Config == nil || seen.Config.Data["image"] != "nginx:1.27" || seen.Extra != nil {
		t.Fatalf("inputs: %+v", seen)
	}
}
