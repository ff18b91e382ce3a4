// Command health computes what kstatus (sigs.k8s.io/cli-utils/pkg/kstatus, what Flux's
// health checks and `kubectl wait`-style tools use) concludes about one of enoki's objects:
// `health kstatus`. Argo CD's verdict comes from tests/health-argocd (Argo CD's own code).
//
// It reads one object as JSON on stdin and prints one line: the status, a tab, the message.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: health kstatus  (object as JSON on stdin)")
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	// Decoded as the API machinery decodes objects (whole numbers as int64).
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		fail("stdin is not a Kubernetes object: %v", err)
	}
	switch os.Args[1] {
	case "kstatus":
		res, err := status.Compute(u)
		if err != nil {
			fail("kstatus: %v", err)
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	default:
		fail("unknown check %q", os.Args[1])
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "health: "+format+"\n", args...)
	os.Exit(2)
}
