// Command health-argocd runs an Argo CD resource health check (a Lua script) the way Argo CD
// does, with Argo CD's own Lua health evaluation (github.com/argoproj/argo-cd/v3/util/lua):
// `health-argocd FILE.lua` reads one object as JSON on stdin and prints one line: the health
// status, a tab, the message. Argo CD v3.6 needs Go 1.27: built with GOTOOLCHAIN=go1.27.3
// (hack/test.sh does).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func main() {
	if len(os.Args) != 2 {
		fail("usage: health-argocd FILE.lua  (object as JSON on stdin)")
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		fail("stdin is not a Kubernetes object: %v", err)
	}
	vm := lua.VM{}
	h, err := vm.ExecuteHealthLua(u, string(script))
	if err != nil {
		fail("argo cd health: %v", err)
	}
	fmt.Printf("%s\t%s\n", h.Status, h.Message)
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "health-argocd: "+format+"\n", args...)
	os.Exit(2)
}
