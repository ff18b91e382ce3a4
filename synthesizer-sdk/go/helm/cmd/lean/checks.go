package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// marker names a directory lean writes: the only kind it empties.
const marker = ".enoki-lean"

// written are what lean writes into its directory, removed before it writes them again.
var written = []string{"helm", "client-go", "go.mod", "go.sum"}

// prepare makes dir lean's: a new or empty directory, or one lean wrote before (its marker),
// of which only what lean writes is removed. A directory holding the module is refused.
func prepare(dir, module string) error {
	if rel, err := filepath.Rel(dir, module); err == nil && !strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s holds the module (%s): give lean a directory of its own", dir, module)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
			return fmt.Errorf("%s is not empty and lean did not write it: give lean a directory of its own", dir)
		}
		for _, name := range written {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, marker), []byte("written by synthesizer-sdk/go/helm/cmd/lean\n"), 0o644)
}

// notReplaced refuses a module that replaces Helm or client-go itself.
func notReplaced(gomod string) error {
	src, err := os.ReadFile(gomod)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(src), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "replace"))
		if len(fields) > 1 && (fields[0] == helmModule || fields[0] == clientGo) &&
			(fields[1] == "=>" || (len(fields) > 2 && fields[2] == "=>")) {
			return fmt.Errorf("%s replaces %s already: lean replaces it with its own copy", gomod, fields[0])
		}
	}
	return nil
}

// allowedImporters may import client-go's scheme in a lean build: Helm reads its group
// versions (chart/common), the discovery client of Helm's `lookup` (never called in wasm:
// there is no cluster) holds its codecs.
var allowedImporters = map[string]bool{
	"helm.sh/helm/v4/pkg/chart/common": true,
	"k8s.io/client-go/discovery":       true,
}

// schemeUnused refuses a build of packages (for wasip1, with the lean go.mod) in which
// anything else imports client-go's scheme or typed clientset: with no types registered,
// decoding or defaulting through them fails at run time.
func schemeUnused(dir string, packages []string) error {
	args := append([]string{"list", "-modfile=" + filepath.Join(dir, "go.mod"), "-deps", "-f",
		"{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, packages...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list %s: %w\n%s", strings.Join(packages, " "), err, stderr.String())
	}
	var bad []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || allowedImporters[fields[0]] {
			continue
		}
		for _, imp := range fields[1:] {
			if imp == schemePackage || imp == clientsetPackage {
				bad = append(bad, fields[0]+" imports "+imp)
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		more := ""
		if len(bad) > 5 {
			more = fmt.Sprintf(" (and %d more)", len(bad)-5)
			bad = bad[:5]
		}
		return fmt.Errorf("the lean build registers no Kubernetes API types, but %s%s: build it "+
			"without lean", strings.Join(bad, "; "), more)
	}
	return nil
}

const (
	schemePackage    = "k8s.io/client-go/kubernetes/scheme"
	clientsetPackage = "k8s.io/client-go/kubernetes"
)
