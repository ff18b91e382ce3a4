// Command health computes what GitOps tools conclude about enoki's objects, with their own
// code: `health kstatus` runs kstatus (sigs.k8s.io/cli-utils/pkg/kstatus, what Flux's health
// checks and `kubectl wait`-style tools use); `health argocd FILE.lua` runs an Argo CD
// resource health check under Argo CD's documented Lua contract (the object as the global
// `obj`, the script returns a table with `status` and `message`), with gopher-lua, the Lua VM
// Argo CD embeds. Argo CD's own module (github.com/argoproj/argo-cd) does not build from the
// module proxy here, so its VM set-up is restated: package, base, table, string and math.
//
// It reads one object as JSON on stdin and prints one line: the status, a tab, the message.
package main

import (
	"fmt"
	"io"
	"os"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: health kstatus | health argocd FILE.lua  (object as JSON on stdin)")
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
	obj := u.Object
	switch os.Args[1] {
	case "kstatus":
		res, err := status.Compute(u)
		if err != nil {
			fail("kstatus: %v", err)
		}
		fmt.Printf("%s\t%s\n", res.Status, res.Message)
	case "argocd":
		if len(os.Args) != 3 {
			fail("usage: health argocd FILE.lua")
		}
		st, msg, err := argocd(os.Args[2], obj)
		if err != nil {
			fail("argocd: %v", err)
		}
		fmt.Printf("%s\t%s\n", st, msg)
	default:
		fail("unknown check %q", os.Args[1])
	}
}

// argocd runs a health script the way Argo CD does: a fresh VM without the unsafe libraries,
// `obj` set to the object, the script run, and the returned table's `status` and `message`
// read back.
func argocd(path string, obj map[string]interface{}) (string, string, error) {
	script, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(string(script)); err != nil {
		return "", "", err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", l.Get(-1).Type())
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message")), nil
}

// toLua converts decoded JSON into Lua values as Argo CD's conversion does (objects and arrays
// become tables, numbers become numbers).
func toLua(l *lua.LState, v interface{}) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []interface{}:
		t := l.NewTable()
		for _, e := range v {
			t.Append(toLua(l, e))
		}
		return t
	case map[string]interface{}:
		t := l.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(l, e))
		}
		return t
	default:
		return lua.LString(fmt.Sprint(v))
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "health: "+format+"\n", args...)
	os.Exit(2)
}
