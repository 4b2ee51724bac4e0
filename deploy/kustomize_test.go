package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// kubectl returns kubectl's path. Without it the test skips, except in CI
// (CI=true), where it fails: .ci/run installs Debian's kubernetes-client.
func kubectl(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kubectl not found (CI=true: .ci/run installs Debian's kubernetes-client)")
		}
		t.Skip("kubectl not found")
	}
	return p
}

// renderK8s is what `kubectl apply -k deploy/kubernetes` applies: the
// objects of `kubectl kustomize`.
func renderK8s(t *testing.T) k8s {
	t.Helper()
	out, err := exec.Command(kubectl(t), "kustomize", k8sDir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", k8sDir, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", k8sDir, err)
	}
	var k k8s
	dec := yaml.NewDecoder(strings.NewReader(string(out)))
	for {
		o := k8sObject{File: "kubectl kustomize " + k8sDir}
		err := dec.Decode(&o.Node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", k8sDir, err, out)
		}
		if err := o.Node.Decode(&o); err != nil {
			t.Fatalf("kubectl kustomize %s: %v", k8sDir, err)
		}
		k.objects = append(k.objects, o)
	}
	return k
}

// TestKubernetesRendered renders deploy/kubernetes with kubectl kustomize
// and checks what a cluster would get: every manifest of the directory but
// the Secret's example (the real Secret is created by hand, and never
// overwritten by placeholders), the image the kustomization names, every
// credential the StatefulSet passes coming from the Secret, under keys the
// example defines, and the NetworkPolicy admitting the decision port only
// from pods labelled tokenring.io/client and gossip and peers only from
// the members. Then it runs tokenringd as the rendered StatefulSet's pod,
// on 0.0.0.0, with the rendered ConfigMap's config and a Secret of fresh
// random values: the decision API refuses a request without the client
// token or with a wrong one (401) and admits one with it (200).
func TestKubernetesRendered(t *testing.T) {
	rendered := renderK8s(t)
	source := loadK8s(t)
	id := func(o k8sObject) string { return o.Kind + "/" + o.Metadata.Name }
	var want, got []string
	var example []k8sObject
	for _, o := range source.objects {
		if filepath.Base(o.File) == secretExample {
			example = append(example, o)
			continue
		}
		want = append(want, id(o))
	}
	for _, o := range rendered.objects {
		got = append(got, id(o))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("kubectl kustomize renders %v, want the manifests' %v", got, want)
	}
	if slices.ContainsFunc(rendered.objects, func(o k8sObject) bool { return o.Kind == "Secret" }) {
		t.Errorf("kubectl kustomize renders a Secret: applying it would overwrite the real credentials")
	}

	// The rendered objects, with the Secret created by hand: fresh values
	// under the example's keys.
	d := deploymentOf(t, k8s{objects: append(rendered.objects, example...)})
	var images struct {
		Images []struct {
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
		} `yaml:"images"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(k8sDir, "kustomization.yaml"))), &images); err != nil {
		t.Fatal(err)
	}
	for _, i := range images.Images {
		if want := i.NewName + ":" + i.NewTag; d.c.Image != want {
			t.Errorf("rendered StatefulSet: image %s, want the kustomization's %s", d.c.Image, want)
		}
	}
	secrets := map[string]bool{}
	for _, e := range d.c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secrets[e.Name] = true
		}
	}
	for _, name := range []string{clientTokenEnv, "TOKENRING_CLUSTER_SECRET", "TOKENRING_ADMIN_TOKEN"} {
		if !secrets[name] {
			t.Errorf("rendered StatefulSet: %s does not come from the Secret", name)
		}
	}
	checkNetworkPolicy(t, d)

	fresh := map[string]string{}
	for k := range d.secret.StringData {
		b := make([]byte, 32)
		rand.Read(b)
		fresh[k] = hex.EncodeToString(b)
	}
	d.secret.StringData = fresh
	m := startMemberOn(t, d, d.configText(t), "tokenring-0", nil, "0.0.0.0")
	checkProtectedMember(t, m)
	if s, body := acquireAs(t, m, "acme", "not-"+m.token); s != http.StatusUnauthorized {
		t.Errorf("acquire with a wrong token: %d %s, want 401", s, body)
	}
	if strings.HasPrefix(m.token, "REPLACE-ME") || m.token == "" {
		t.Errorf("the member's client token %q is not the fresh Secret's", m.token)
	}
}
