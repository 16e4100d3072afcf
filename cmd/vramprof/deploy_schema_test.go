//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// kubeTools returns the OpenAPI document of the Kubernetes release go.mod's
// k8s.io/api belongs to and a kubeconform binary, fetched by
// testdata/kube/fetch.sh (a no-op once fetched; make test runs it).
func kubeTools(t *testing.T) (swagger, kubeconform string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(probetest.Root(), "testdata", "kube", "fetch.sh")).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		skipOrFail(t, "testdata/kube/fetch.sh: %v: the Go module proxy must serve k8s.io/kubernetes and kubeconform", err)
	}
	specs, err := filepath.Glob(filepath.Join(dir, "swagger-v1.*.json"))
	require.NoError(t, err)
	require.Len(t, specs, 1, "one OpenAPI document in %s", dir)
	return specs[0], filepath.Join(dir, "bin", "kubeconform")
}

// kubeSchemas writes, for each kind Kubernetes' OpenAPI document defines
// (a definition with x-kubernetes-group-version-kind), a JSON schema where
// kubeconform's -schema-location template
// DIR/{{.ResourceKind}}{{.KindSuffix}}.json finds it (daemonset-apps-v1.json,
// service-v1.json), as openapi2jsonschema --strict makes them for
// kubeconform's own schema registry: the kind's definition by reference with
// every definition beside it; an object with properties admits no other
// field (the API server's strict field validation); an int-or-string
// field is a string or an integer. It returns the directory.
func kubeSchemas(t *testing.T, swagger string) string {
	t.Helper()
	data, err := os.ReadFile(swagger)
	require.NoError(t, err)
	var doc struct {
		Definitions map[string]any `json:"definitions"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	require.NotEmpty(t, doc.Definitions, "%s: no definitions", swagger)
	for _, d := range doc.Definitions {
		strictSchema(d)
	}
	dir := t.TempDir()
	kinds := 0
	for name, d := range doc.Definitions {
		gvks, _ := d.(map[string]any)["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			// kubeconform's KindSuffix: -<group's first label>-<version>, or
			// -<version> for the core group.
			suffix := "-" + version
			if group != "" {
				suffix = "-" + strings.ToLower(strings.Split(group, ".")[0]) + suffix
			}
			schema := map[string]any{
				"$schema":     "http://json-schema.org/draft-07/schema#",
				"$ref":        "#/definitions/" + name,
				"definitions": doc.Definitions,
			}
			b, err := json.Marshal(schema)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, strings.ToLower(kind)+suffix+".json"), b, 0o644))
			kinds++
		}
	}
	require.Positive(t, kinds, "%s defines no kind", swagger)
	return dir
}

// strictSchema makes s, a schema of the OpenAPI document, and every schema
// in it, as kubeconform's strict schemas are (see kubeSchemas).
func strictSchema(s any) {
	switch v := s.(type) {
	case map[string]any:
		if v["format"] == "int-or-string" {
			v["type"] = []any{"string", "integer"}
		}
		if _, ok := v["properties"]; ok {
			if _, set := v["additionalProperties"]; !set {
				v["additionalProperties"] = false
			}
		}
		for k, c := range v {
			if k != "enum" && k != "example" && k != "default" {
				strictSchema(c)
			}
		}
	case []any:
		for _, c := range v {
			strictSchema(c)
		}
	}
}

// kubeconformResult is one resource of kubeconform's -output json.
type kubeconformResult struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Msg    string `json:"msg"`
}

// runKubeconform validates the manifests in file against the schemas in
// dir, strictly (duplicate keys too), and returns each resource's result;
// a resource whose schema is missing is an error, not a skip.
func runKubeconform(t *testing.T, kubeconform, dir, file string) ([]kubeconformResult, error) {
	t.Helper()
	cmd := exec.Command(kubeconform, "-strict", "-output", "json", "-verbose",
		"-schema-location", filepath.Join(dir, "{{.ResourceKind}}{{.KindSuffix}}.json"), file)
	out, runErr := cmd.Output()
	var res struct {
		Resources []kubeconformResult `json:"resources"`
	}
	require.NoError(t, json.Unmarshal(out, &res), "kubeconform's output: %s (%v)", out, runErr)
	return res.Resources, runErr
}

// TestDeployManifestsSchema validates deploy/kubernetes.yaml with kubeconform
// against Kubernetes' own OpenAPI document, for the release the project's
// k8s.io/api types belong to: every resource valid (types, required fields,
// no unknown field). Each broken copy of the file, one way each, is
// rejected with the reason, so that the check is known to bite.
func TestDeployManifestsSchema(t *testing.T) {
	swagger, kubeconform := kubeTools(t)
	dir := kubeSchemas(t, swagger)

	res, err := runKubeconform(t, kubeconform, dir, manifestFile)
	require.NoError(t, err, "kubeconform on %s: %+v", manifestFile, res)
	var kinds []string
	for _, r := range res {
		assert.Equal(t, "statusValid", r.Status, "%s %s: %s", r.Kind, r.Name, r.Msg)
		kinds = append(kinds, r.Kind)
	}
	assert.ElementsMatch(t, []string{"Namespace", "DaemonSet", "Service"}, kinds, "the resources checked")

	data, err := os.ReadFile(manifestFile)
	require.NoError(t, err)
	for _, tc := range []struct{ name, old, new, kind, want string }{
		{"unknown field", "hostPID: true", "hostPIDs: true", "DaemonSet", "additional properties 'hostPIDs' not allowed"},
		{"wrong type", "containerPort: 10477", `containerPort: "metrics"`, "DaemonSet", "containerPort': got string, want integer"},
		{"required field", "  selector:\n", "  selectorx:\n", "DaemonSet", "missing property 'selector'"},
		{"int-or-string", "targetPort: metrics", "targetPort: [1]", "Service", "targetPort': got array, want integer or string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := strings.Replace(string(data), tc.old, tc.new, 1)
			require.NotEqual(t, string(data), broken, "%q not in %s", tc.old, manifestFile)
			file := filepath.Join(t.TempDir(), "kubernetes.yaml")
			require.NoError(t, os.WriteFile(file, []byte(broken), 0o644))
			res, err := runKubeconform(t, kubeconform, dir, file)
			require.Error(t, err, "kubeconform accepted the broken file")
			var msgs []string
			for _, r := range res {
				if r.Kind == tc.kind {
					assert.Equal(t, "statusInvalid", r.Status, "%s: %s", r.Kind, r.Msg)
				} else {
					assert.Equal(t, "statusValid", r.Status, "%s: %s", r.Kind, r.Msg)
				}
				msgs = append(msgs, fmt.Sprintf("%s: %s", r.Kind, r.Msg))
			}
			assert.Contains(t, strings.Join(msgs, "\n"), tc.want)
		})
	}
}
