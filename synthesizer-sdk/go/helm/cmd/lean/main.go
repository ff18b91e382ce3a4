// Command lean writes a go.mod that builds a Helm module without the Kubernetes API types:
// half the code of a plain build (41 MB of wasm instead of 81 MB for cmd/helm-chart), so
// half the time to compile it when a controller first sees it, and the same renders.
//
// A plain build links every built-in Kubernetes API type with all its generated methods:
// client-go's kubernetes/scheme registers them all when the program starts, and Helm imports
// it for one list, the group versions of its default capabilities (`.Capabilities.APIVersions`
// when no cluster's are given); Helm's internal/version imports client-go's typed clientset
// only to keep client-go in the build information (it reads its version there). The build
// this writes replaces, in copies of those two modules taken from the module cache:
//   - client-go's kubernetes/scheme/register.go, by one that knows the same group versions in
//     the same order (read here from Helm's own DefaultVersionSet) without their types;
//   - the blank import of the clientset in Helm's internal/version (client-go stays in the
//     build: Helm's engine imports its REST, discovery and dynamic clients).
//
// It then builds a probe with the new go.mod and checks that Helm's default capabilities
// (API versions, Kubernetes version) are the same as in a plain build, and fails otherwise.
//
// It also refuses a build in which anything but Helm's chart/common and client-go's discovery
// client imports client-go's scheme or typed clientset: a synthesizer of yours that decodes
// typed objects with that scheme would compile and then fail at run time.
//
// usage, from the module of the synthesizer (this module for cmd/helm-chart), without GOOS
// and GOARCH set (lean runs on the build machine):
//
//	go run github.com/enoki-dev/enoki/synthesizer-sdk/go/helm/cmd/lean DIR [PACKAGE...]
//	GOOS=wasip1 GOARCH=wasm go build -modfile=DIR/go.mod ...
//
// PACKAGE names what will be built (default ./...). DIR is lean's own: it holds only what
// lean writes (a DIR with anything else in it is refused), and is referred to by a relative
// path from the module, so the module's bytes do not depend on where it is built. Workspaces
// (go.work) and vendor directories are not supported: lean sets GOWORK=off.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	helmModule   = "helm.sh/helm/v4"
	clientGo     = "k8s.io/client-go"
	schemeFile   = "kubernetes/scheme/register.go"
	versionFile  = "internal/version/clientgo.go"
	clientsetUse = "\t_ \"k8s.io/client-go/kubernetes\" // Force k8s.io/client-go to be included in the build\n"
	self         = "github.com/enoki-dev/enoki/synthesizer-sdk/go/helm/cmd/lean"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-capabilities" {
		fmt.Print(capabilities())
		return
	}
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: lean DIR [PACKAGE...] (writes DIR/go.mod: go build -modfile=DIR/go.mod)")
		os.Exit(2)
	}
	packages := os.Args[2:]
	if len(packages) == 0 {
		packages = []string{"./..."}
	}
	if err := run(os.Args[1], packages); err != nil {
		fmt.Fprintln(os.Stderr, "lean:", err)
		os.Exit(1)
	}
}

// capabilities are Helm's default capabilities, one line each.
func capabilities() string {
	c := common.DefaultCapabilities
	return fmt.Sprintf("kube %s %s %s\napi %s\n", c.KubeVersion.Version, c.KubeVersion.Major,
		c.KubeVersion.Minor, strings.Join(c.APIVersions, " "))
}

func run(dir string, packages []string) error {
	// Module mode, this module's go.mod: a workspace would refuse -modfile.
	os.Setenv("GOWORK", "off")
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	root, err := goEnv("GOMOD")
	if err != nil {
		return err
	}
	if root == "" || root == os.DevNull {
		return fmt.Errorf("run it from the synthesizer's Go module")
	}
	rel, err := filepath.Rel(filepath.Dir(root), dir)
	if err != nil {
		return err
	}
	if err := prepare(dir, filepath.Dir(root)); err != nil {
		return err
	}
	if err := notReplaced(root); err != nil {
		return err
	}
	helm, err := copyModule(helmModule, filepath.Join(dir, "helm"))
	if err != nil {
		return err
	}
	if err := dropClientset(filepath.Join(helm, versionFile)); err != nil {
		return err
	}
	client, err := copyModule(clientGo, filepath.Join(dir, "client-go"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(client, schemeFile), []byte(register()), 0o644); err != nil {
		return err
	}
	if err := writeModFile(root, dir, rel); err != nil {
		return err
	}
	if err := probe(dir); err != nil {
		return err
	}
	return schemeUnused(dir, packages)
}

// writeModFile copies the module's go.mod and go.sum into dir, the go.mod replacing Helm and
// client-go by their copies (relative paths).
func writeModFile(root, dir, rel string) error {
	mod, err := os.ReadFile(root)
	if err != nil {
		return err
	}
	sum, err := os.ReadFile(strings.TrimSuffix(root, ".mod") + ".sum")
	if err != nil {
		return err
	}
	prefix := filepath.ToSlash(rel)
	if !strings.HasPrefix(prefix, "../") {
		prefix = "./" + prefix
	}
	path := func(sub string) string {
		if p := prefix + "/" + sub; !strings.ContainsAny(p, " \t\"") {
			return p
		}
		return strconv.Quote(prefix + "/" + sub)
	}
	mod = append(mod, fmt.Sprintf("\nreplace %s => %s\n\nreplace %s => %s\n",
		helmModule, path("helm"), clientGo, path("client-go"))...)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), mod, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
}

// probe checks that a build with the new go.mod has Helm's default capabilities.
func probe(dir string) error {
	cmd := exec.Command("go", "run", "-modfile="+filepath.Join(dir, "go.mod"), self, "-capabilities")
	cmd.Env = append(os.Environ(), "GOOS=", "GOARCH=",
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	cmd.Stderr = os.Stderr
	got, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("the probe built with %s/go.mod: %w", dir, err)
	}
	if want := capabilities(); string(got) != want {
		return fmt.Errorf("Helm's default capabilities differ in the lean build:\n%s\nplain build:\n%s", got, want)
	}
	return nil
}

// dropClientset removes the blank import of client-go's typed clientset.
func dropClientset(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Count(src, []byte(clientsetUse)) != 1 {
		return fmt.Errorf("%s no longer imports the clientset as expected: update cmd/lean", path)
	}
	return os.WriteFile(path, bytes.Replace(src, []byte(clientsetUse), nil, 1), 0o644)
}

// copyModule copies the module cache's copy of the build's version of module to dst,
// writable.
func copyModule(module, dst string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	src := strings.TrimSpace(string(out))
	if src == "" {
		return "", fmt.Errorf("%s has no directory in the module cache (a vendored build? lean "+
			"needs module mode: go mod download %s)", module, module)
	}
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	return dst, err
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// register is the stand-in for client-go's kubernetes/scheme/register.go.
func register() string {
	var b strings.Builder
	b.WriteString(registerHead)
	for _, v := range common.DefaultVersionSet {
		gv, err := schema.ParseGroupVersion(v)
		if err != nil {
			panic(fmt.Sprintf("Helm's default API version %q: %v", v, err))
		}
		fmt.Fprintf(&b, "\t{Group: %q, Version: %q},\n", gv.Group, gv.Version)
	}
	b.WriteString("}\n")
	return b.String()
}

const registerHead = `// Code generated by synthesizer-sdk/go/helm/cmd/lean. DO NOT EDIT.

// Package scheme stands in for client-go's kubernetes/scheme in a lean Helm module: the same
// exported names and group versions (in the same order), none of the API types.
package scheme

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Scheme knows the group versions of client-go's scheme, each with the meta types only.
var Scheme = runtime.NewScheme()

// Codecs of Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

// ParameterCodec of Scheme.
var ParameterCodec = runtime.NewParameterCodec(Scheme)

var localSchemeBuilder = runtime.SchemeBuilder{addGroupVersions}

// AddToScheme adds the group versions to a scheme.
var AddToScheme = localSchemeBuilder.AddToScheme

func addGroupVersions(s *runtime.Scheme) error {
	for _, gv := range groupVersions {
		metav1.AddToGroupVersion(s, gv)
	}
	return nil
}

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(AddToScheme(Scheme))
}

// Helm's DefaultVersionSet, read from client-go's scheme when this file was written.
var groupVersions = []schema.GroupVersion{
`
