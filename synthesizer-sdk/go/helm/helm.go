// Package helm renders a Helm chart inside an enoki synthesizer with Helm's own engine — the
// counterpart of Eno's pkg/helmshim — so a chart needs no rewriting: the output is what
// `helm template` prints for the same chart, values, release name and namespace.
//
// The chart comes from an fs.FS (an embed.FS holding the chart directory) or from the bytes of
// a packaged chart (.tgz). Values are computed from the bound inputs by the author's function
// and merged over the chart's values.yaml as Helm merges them. The release name and namespace
// default to the Composition's (Eno's shim: `eno-helm-shim` in `default`, see EnoShim).
//
// What differs from `helm install` (and from Eno's shim, which emits hooks, names the release
// `eno-helm-shim` in `default`, sees Helm's default `.Capabilities` and adds no annotations):
//   - hooks (helm.sh/hook) are not run; they are not emitted either, unless Options.Hooks
//     (or Options.EnoShim) asks for them, appended after the rest as Eno's shim appends them;
//     NOTES.txt and partials render nothing;
//   - CRDs from the chart's crds/ directory are emitted, in a readiness group of their own
//     before everything else (enoki applies custom resources after their CRDs anyway);
//   - those CRDs, every CRD of templates/ and objects annotated helm.sh/resource-policy: keep
//     are left in place when the Composition is deleted or stops rendering them
//     (enoki.dev/prune: disabled): Helm leaves crds/ and `keep` objects, and no values change
//     may take a CRD, and with it every custom resource of it, away;
//   - `lookup` finds nothing (there is no cluster in the sandbox): charts must cope with an
//     empty result, as they do under `helm template`;
//   - `.Capabilities` are Helm's client-only defaults, plus the API versions of Options (or,
//     when Options sets none, of HELM_API_VERSIONS, which enoki fills from the target
//     cluster's discovery), with Options.KubeVersion or HELM_KUBE_VERSION as the version.
//
// Readiness groups, readiness checks and every enoki.dev/* or eno.azure.io/* annotation
// written in the chart's templates work as in any synthesizer.
//
// Options.EnoShim (the built-in module: HELM_SHIM=eno, from spec.helm.shim) renders what Eno's
// pkg/helmshim renders: the release `eno-helm-shim` in namespace `default` (unless
// Options.ReleaseName/Namespace say otherwise) with the hook manifests after the rest. What
// still differs from Eno's shim: Helm v4's engine (Eno's is v3), `.Capabilities` (the
// cluster's, when the controller gives them; Eno's shim sees Helm's defaults), and the
// enoki.dev/readiness-group and enoki.dev/prune annotations added to CRDs and `keep` objects:
// stripped before applying, they change only enoki's order (crds/ CRDs first, in -1000; Eno
// puts every CRD in -100) and keep those objects when the chart stops rendering them, which
// Eno's shim does not.
package helm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"sigs.k8s.io/yaml"

	sdk "github.com/enoki-dev/enoki/synthesizer-sdk/go"
)

// CRDGroup is the readiness group of the CRDs from a chart's crds/ directory.
const CRDGroup = -1000

// Options say which chart to render and how.
type Options struct {
	// FS holds the chart directory at Dir (e.g. an embed.FS); or Archive is a packaged chart.
	FS      fs.FS
	Dir     string
	Archive []byte
	// Values computes the values from the inputs (nil: the chart's defaults).
	Values func(in *sdk.ResourceList) (map[string]any, error)
	// ReleaseName and Namespace default to the Composition's name and namespace (with EnoShim:
	// Eno's shim's, EnoReleaseName and EnoNamespace).
	ReleaseName string
	Namespace   string
	// Hooks emits the hook manifests (helm.sh/hook) after the rest, as Eno's shim does.
	Hooks bool
	// EnoShim renders as Eno's pkg/helmshim: its release name and namespace, and Hooks. The
	// built-in module (cmd/helm-chart) sets it from HELM_SHIM=eno, which the controller sets
	// from a Synthesizer's spec.helm.shim: eno.
	EnoShim bool
	// KubeVersion (e.g. "v1.35.0") and APIVersions set .Capabilities beyond Helm's defaults.
	// Empty, they come from HELM_KUBE_VERSION and HELM_API_VERSIONS (comma-separated) of the
	// synthesis environment: the target cluster's, when the Synthesizer takes them.
	KubeVersion string
	APIVersions []string
}

// Load reads the chart of o.
func (o Options) Load() (*chart.Chart, error) {
	if o.Archive != nil {
		return loader.LoadArchive(bytes.NewReader(o.Archive))
	}
	if o.FS == nil {
		return nil, errors.New("helm: Options needs FS or Archive")
	}
	dir := o.Dir
	if dir == "" {
		dir = "."
	}
	var files []*archive.BufferedFile
	err := fs.WalkDir(o.FS, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(o.FS, p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		files = append(files, &archive.BufferedFile{Name: path.Clean(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("helm: reading the chart: %w", err)
	}
	return loader.LoadFiles(files)
}

// Render renders the chart as `helm template --include-crds` would, and returns its objects
// in Helm's install order, CRDs first.
func Render(in *sdk.ResourceList, o Options) ([]sdk.Object, error) {
	ch, err := o.Load()
	if err != nil {
		return nil, err
	}
	vals := map[string]any{}
	if o.Values != nil {
		if vals, err = o.Values(in); err != nil {
			return nil, err
		}
	}
	name, namespace := o.ReleaseName, o.Namespace
	if o.EnoShim {
		o.Hooks = true
		if name == "" {
			name = EnoReleaseName
		}
		if namespace == "" {
			namespace = EnoNamespace
		}
	}
	if in.FunctionConfig != nil {
		if name == "" {
			name = in.FunctionConfig.Composition.Name
		}
		if namespace == "" {
			namespace = in.FunctionConfig.Composition.Namespace
		}
	}
	kubeVersion, apis := o.KubeVersion, o.APIVersions
	if kubeVersion == "" {
		kubeVersion = os.Getenv("HELM_KUBE_VERSION")
	}
	if apis == nil {
		apis = EnvAPIVersions()
	}
	manifest, err := render(ch, vals, release{name, namespace, kubeVersion, apis, o.Hooks})
	if err != nil {
		return nil, err
	}
	return Objects(manifest, ch)
}

// The release name and namespace Eno's pkg/helmshim installs a chart as.
const (
	EnoReleaseName = "eno-helm-shim"
	EnoNamespace   = "default"
)

// release is what a chart is rendered as.
type release struct {
	name, namespace, kubeVersion string
	apis                         []string
	hooks                        bool
}

// EnvAPIVersions is HELM_API_VERSIONS of the environment, split at commas (nil when unset).
func EnvAPIVersions() []string {
	var apis []string
	for _, a := range strings.Split(os.Getenv("HELM_API_VERSIONS"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			apis = append(apis, a)
		}
	}
	return apis
}

// Template is `helm template --include-crds NAME CHART -n NAMESPACE`: the rendered manifest,
// hooks and NOTES.txt left out — the steps of Helm's client-only install (dependencies
// processed, values coalesced and checked against values.schema.json, templates rendered,
// manifests in Helm's install order after the crds/ CRDs), without Helm's action package,
// which does not build for wasip1.
func Template(ch *chart.Chart, vals map[string]any, name, namespace, kubeVersion string, apis []string) (string, error) {
	return render(ch, vals, release{name, namespace, kubeVersion, apis, false})
}

// render is Template, with the hook manifests appended when r.hooks (as Eno's shim appends
// its release's hooks to the manifest).
func render(ch *chart.Chart, vals map[string]any, r release) (string, error) {
	name, namespace := r.name, r.namespace
	caps := common.DefaultCapabilities.Copy()
	if r.kubeVersion != "" {
		v, err := common.ParseKubeVersion(r.kubeVersion)
		if err != nil {
			return "", fmt.Errorf("helm: kube version %q: %w", r.kubeVersion, err)
		}
		caps.KubeVersion = *v
	}
	caps.APIVersions = append(caps.APIVersions, r.apis...)
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return "", fmt.Errorf("helm: chart dependencies: %w", err)
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, caps.KubeVersion.String()) {
		return "", fmt.Errorf("helm: chart requires kubeVersion %s, incompatible with %s", c, caps.KubeVersion.Version)
	}
	options := common.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}
	values, err := util.ToRenderValuesWithSchemaValidation(ch, vals, options, caps, false)
	if err != nil {
		return "", fmt.Errorf("helm: %w", err)
	}
	files, err := engine.Engine{}.Render(ch, values)
	if err != nil {
		return "", fmt.Errorf("helm: %w", err)
	}
	for k := range files {
		if strings.HasSuffix(k, "NOTES.txt") {
			delete(files, k)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return "", fmt.Errorf("helm: %w", err)
	}
	var b strings.Builder
	for _, crd := range ch.CRDObjects() {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", crd.Filename, string(crd.File.Data))
	}
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	if r.hooks {
		for _, h := range hooks {
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
		}
	}
	return b.String(), nil
}

// Objects splits a rendered manifest into objects; the chart's crds/ CRDs get [CRDGroup].
func Objects(manifest string, ch *chart.Chart) ([]sdk.Object, error) {
	crds := map[string]bool{}
	if ch != nil {
		for _, c := range ch.CRDObjects() {
			crds[c.Filename] = true
		}
	}
	var out []sdk.Object
	for _, doc := range splitDocuments(manifest) {
		source, body := sourceOf(doc)
		if strings.TrimSpace(body) == "" {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(body), &obj); err != nil {
			return nil, fmt.Errorf("helm: %s: %w", source, err)
		}
		if len(obj) == 0 {
			continue
		}
		if crds[source] {
			sdk.ReadinessGroup(obj, CRDGroup)
		}
		// Helm never deletes the CRDs of crds/, nor what says helm.sh/resource-policy: keep;
		// no CRD is deleted because values changed (its custom resources would go with it).
		if (crds[source] || keep(obj) || isCRD(obj)) && !hasAnnotation(obj, "prune") {
			sdk.Annotate(obj, "enoki.dev/prune", "disabled")
		}
		out = append(out, obj)
	}
	return out, nil
}

// isCRD reports a CustomResourceDefinition.
func isCRD(obj map[string]any) bool {
	v, _ := obj["apiVersion"].(string)
	return obj["kind"] == "CustomResourceDefinition" && strings.HasPrefix(v, "apiextensions.k8s.io/")
}

// keep reports an object annotated helm.sh/resource-policy: keep (as Helm reads it: trimmed,
// any case).
func keep(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	v, _ := ann["helm.sh/resource-policy"].(string)
	return strings.ToLower(strings.TrimSpace(v)) == "keep"
}

// hasAnnotation reports a non-empty enoki.dev/<name> or eno.azure.io/<name> annotation the
// chart wrote itself (it wins over what the shim would add; an empty value, e.g. an unset
// value quoted, says nothing).
func hasAnnotation(obj map[string]any, name string) bool {
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	for _, k := range []string{"enoki.dev/" + name, "eno.azure.io/" + name} {
		if v, _ := ann[k].(string); strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

// splitDocuments splits a multi-document YAML stream on `---` lines.
func splitDocuments(manifest string) []string {
	var docs []string
	var cur []string
	for _, line := range strings.Split(manifest, "\n") {
		if strings.TrimRight(line, " \t") == "---" {
			docs = append(docs, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(docs, strings.Join(cur, "\n"))
}

// sourceOf reads Helm's `# Source: <chart>/<path>` comment of a document.
func sourceOf(doc string) (string, string) {
	for _, line := range strings.Split(doc, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source: "); ok {
			return s, doc
		}
	}
	return "", doc
}

// Run is sdk.Run for a chart: the synthesizer's whole main.
func Run(o Options) {
	sdk.Run(func(in *sdk.ResourceList) ([]sdk.Object, []sdk.Result, error) {
		objs, err := Render(in, o)
		return objs, nil, err
	})
}
