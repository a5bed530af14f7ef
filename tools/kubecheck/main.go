// Command kubecheck checks Kubernetes manifests offline, as the API server
// decodes them with strict field validation: each object of a YAML stream
// (what helm template writes) is decoded into its Go API type (Kubernetes'
// own, and the Prometheus Operator's for a ServiceMonitor), and an unknown
// or duplicate field, a value of the wrong type, or a kind it does not know
// is an error. It writes the objects as one JSON array on stdout, for the
// chart's tests to read, and exits 1 naming each object that failed.
//
//	go -C tools run ./kubecheck FILE
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// separator splits a YAML stream into its documents.
var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kubecheck FILE (a YAML stream of Kubernetes objects)")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	objs, bad := check(data)
	out, err := json.Marshal(objs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Stdout.Write(append(out, '\n')) //nolint:errcheck // nothing to do about stdout
	for _, b := range bad {
		fmt.Fprintln(os.Stderr, b)
	}
	if len(bad) > 0 {
		os.Exit(1)
	}
}

// check decodes every object of the stream strictly; it returns them as
// JSON values, and a line per object that failed.
func check(stream []byte) (objs []json.RawMessage, bad []string) {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		return nil, []string{err.Error()}
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		return nil, []string{err.Error()}
	}
	strict := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	for i, doc := range separator.Split(string(stream), -1) {
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			bad = append(bad, fmt.Sprintf("document %d: %v", i, err))
			continue
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
			continue // comments only
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(js, &meta); err != nil {
			bad = append(bad, fmt.Sprintf("document %d: %v", i, err))
			continue
		}
		objs = append(objs, js)
		if _, _, err := strict.Decode(js, nil, nil); err != nil {
			bad = append(bad, fmt.Sprintf("%s %s %s: %v", meta.APIVersion, meta.Kind, meta.Metadata.Name, err))
		}
	}
	return objs, bad
}
