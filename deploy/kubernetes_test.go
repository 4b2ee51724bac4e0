package deploy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const k8sDir = "kubernetes"

// The parts of the Kubernetes objects the test reads.
type (
	meta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	k8sObject struct {
		File       string    `yaml:"-"`
		Node       yaml.Node `yaml:"-"`
		APIVersion string    `yaml:"apiVersion"`
		Kind       string    `yaml:"kind"`
		Metadata   meta      `yaml:"metadata"`
	}
	statefulSet struct {
		Spec struct {
			ServiceName         string   `yaml:"serviceName"`
			Replicas            int      `yaml:"replicas"`
			PodManagementPolicy string   `yaml:"podManagementPolicy"`
			Selector            selector `yaml:"selector"`
			Template            struct {
				Metadata meta    `yaml:"metadata"`
				Spec     podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               struct {
			RunAsNonRoot bool `yaml:"runAsNonRoot"`
			RunAsUser    *int `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []envVar `yaml:"env"`
		Ports   []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
			Protocol      string `yaml:"protocol"`
		} `yaml:"ports"`
		StartupProbe   *probe `yaml:"startupProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		Lifecycle      struct {
			PreStop *struct {
				Sleep *struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
		} `yaml:"volumeMounts"`
	}
	envVar struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	servicePort struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort any    `yaml:"targetPort"`
		Protocol   string `yaml:"protocol"`
	}
	service struct {
		Spec struct {
			ClusterIP                string            `yaml:"clusterIP"`
			PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
			Selector                 map[string]string `yaml:"selector"`
			Ports                    []servicePort     `yaml:"ports"`
		} `yaml:"spec"`
	}
	pdb struct {
		Spec struct {
			MaxUnavailable any      `yaml:"maxUnavailable"`
			MinAvailable   any      `yaml:"minAvailable"`
			Selector       selector `yaml:"selector"`
		} `yaml:"spec"`
	}
	networkPolicy struct {
		Spec struct {
			PodSelector selector `yaml:"podSelector"`
			Ingress     []struct {
				From []struct {
					PodSelector *selector `yaml:"podSelector"`
				} `yaml:"from"`
				Ports []struct {
					Port     any    `yaml:"port"`
					Protocol string `yaml:"protocol"`
				} `yaml:"ports"`
			} `yaml:"ingress"`
		} `yaml:"spec"`
	}
	configMap struct {
		Data map[string]string `yaml:"data"`
	}
	secret struct {
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
	}
	kustomization struct {
		Resources []string `yaml:"resources"`
		Images    []struct {
			Name string `yaml:"name"`
		} `yaml:"images"`
	}
)

// k8s is every object in deploy/kubernetes (kustomization.yaml aside).
type k8s struct {
	objects []k8sObject
}

// secretExample is the Secret's file: an example, not in the kustomization.
const secretExample = "secret.example.yaml"

func loadK8s(t *testing.T) k8s {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", k8sDir, err)
	}
	var k k8s
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		dec := yaml.NewDecoder(strings.NewReader(readFile(t, f)))
		for {
			var o k8sObject
			err := dec.Decode(&o.Node)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := o.Node.Decode(&o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" || o.APIVersion == "" || o.Metadata.Name == "" {
				t.Errorf("%s: an object without kind, apiVersion or metadata.name", f)
				continue
			}
			o.File = f
			k.objects = append(k.objects, o)
		}
	}
	return k
}

// one decodes the only object of kind (with the given name, if not empty)
// into v, and returns it.
func (k k8s) one(t *testing.T, kind, name string, v any) k8sObject {
	t.Helper()
	var found []k8sObject
	for _, o := range k.objects {
		if o.Kind == kind && (name == "" || o.Metadata.Name == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want one %s %q, found %d", k8sDir, kind, name, len(found))
	}
	if err := found[0].Node.Decode(v); err != nil {
		t.Fatalf("%s: %s %s: %v", found[0].File, kind, found[0].Metadata.Name, err)
	}
	return found[0]
}

// deployment is the StatefulSet with what it refers to, resolved.
type deployment struct {
	k8s
	sts       statefulSet
	c         container
	img       image
	secret    secret
	secretObj k8sObject
	cm        configMap
	cmObj     k8sObject
	cmKey     string // the config's key in the ConfigMap
	argv      []string
	cmdLine   commandLine
	ports     ports
}

// containerPort resolves a port reference (a containerPort's name, or its
// number) of protocol proto to its number.
func (d deployment) containerPort(t *testing.T, where string, ref any, proto string) int {
	t.Helper()
	if proto == "" {
		proto = "TCP"
	}
	for _, p := range d.c.Ports {
		pp := p.Protocol
		if pp == "" {
			pp = "TCP"
		}
		if pp != proto {
			continue
		}
		switch r := ref.(type) {
		case string:
			if p.Name == r {
				return p.ContainerPort
			}
		case int:
			if p.ContainerPort == r {
				return r
			}
		}
	}
	t.Errorf("%s: port %v/%s is not a containerPort of %s", where, ref, proto, d.c.Name)
	return 0
}

// loadDeployment reads deploy/kubernetes and the Dockerfile, and works out
// the container's command line: the image's ENTRYPOINT plus the args, with
// $(VAR) expanded from env (fake values for the downward API).
func loadDeployment(t *testing.T) deployment {
	t.Helper()
	return deploymentOf(t, loadK8s(t))
}

// deploymentOf is loadDeployment for the objects of k.
func deploymentOf(t *testing.T, k k8s) deployment {
	t.Helper()
	d := deployment{k8s: k, img: checkDockerfile(t)}
	o := d.one(t, "StatefulSet", "", &d.sts)
	if n := len(d.sts.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%s: want one container, got %d", o.File, n)
	}
	d.c = d.sts.Spec.Template.Spec.Containers[0]
	d.secretObj = d.one(t, "Secret", "", &d.secret)
	d.cmObj = d.one(t, "ConfigMap", "", &d.cm)
	if len(d.c.Command) > 0 {
		t.Errorf("%s: the container sets command: leave it to the image's ENTRYPOINT (%q), whose flags bind the ports", o.File, d.img.Entrypoint)
	}
	d.argv = append(slices.Clone(d.img.Entrypoint), d.c.Args...)
	env := d.env(t, o.File, map[string]string{})
	expanded := make([]string, 0, len(d.argv))
	for _, a := range d.argv[1:] {
		expanded = append(expanded, expandK8s(t, o.File, a, env))
	}
	d.cmdLine = parseCommandLine(t, "Dockerfile ENTRYPOINT + "+o.File+" args", expanded)
	d.ports = listenPorts(t, d.cmdLine)
	return d
}

// env resolves the container's environment: plain values, the downward
// API (test values: pod tokenring-0 in namespace default at 127.0.0.1, with
// fields overriding them by field path) and the Secret's keys (its
// placeholders).
func (d deployment) env(t *testing.T, where string, fields map[string]string) map[string]string {
	t.Helper()
	downward := map[string]string{"metadata.name": "tokenring-0", "metadata.namespace": "default", "status.podIP": "127.0.0.1"}
	for k, v := range fields {
		downward[k] = v
	}
	env := map[string]string{}
	for _, e := range d.c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s: env %s set twice", where, e.Name)
		}
		switch vf := e.ValueFrom; {
		case vf == nil:
			env[e.Name] = e.Value
		case vf.FieldRef != nil:
			v, ok := downward[vf.FieldRef.FieldPath]
			if !ok {
				t.Errorf("%s: env %s: fieldRef %s is not one the test knows", where, e.Name, vf.FieldRef.FieldPath)
			}
			env[e.Name] = v
		case vf.SecretKeyRef != nil:
			ref := vf.SecretKeyRef
			v, ok := d.secret.StringData[ref.Key]
			if ref.Name != d.secretObj.Metadata.Name || !ok {
				t.Errorf("%s: env %s: secret %s key %s: not in %s", where, e.Name, ref.Name, ref.Key, d.secretObj.File)
			}
			env[e.Name] = v
		default:
			t.Errorf("%s: env %s: a valueFrom the test does not know", where, e.Name)
		}
	}
	return env
}

var k8sRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandK8s expands $(VAR) as the kubelet does in args, and reports a
// reference to a variable the container does not define (the kubelet would
// pass it through unexpanded).
func expandK8s(t *testing.T, where, s string, env map[string]string) string {
	t.Helper()
	return k8sRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		name := m[2 : len(m)-1]
		v, ok := env[name]
		if !ok {
			t.Errorf("%s: %q refers to $(%s), which the container's env does not define", where, s, name)
		}
		return v
	})
}

// fieldOf returns the downward-API field path of env var name, or "".
func (d deployment) fieldOf(name string) string {
	for _, e := range d.c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

// rawArg returns the unexpanded value of flag name in the container's args.
func (d deployment) rawArg(name string) string {
	for i, a := range d.c.Args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(d.c.Args) {
			return d.c.Args[i+1]
		}
	}
	return ""
}

// configText returns the config file the container's -config names: a key
// of the ConfigMap mounted at its directory.
func (d *deployment) configText(t *testing.T) string {
	t.Helper()
	path, given := d.cmdLine.Get(t, "config")
	if !given {
		t.Fatalf("the container passes no -config: the ConfigMap would be unused")
	}
	for _, m := range d.c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") || m.SubPath != "" {
			continue
		}
		for _, v := range d.sts.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == d.cmObj.Metadata.Name {
				if text, ok := d.cm.Data[rel]; ok {
					d.cmKey = rel
					return text
				}
			}
		}
	}
	t.Fatalf("-config %s: no ConfigMap %s key mounted there", path, d.cmObj.Metadata.Name)
	return ""
}

func TestKubernetesKustomization(t *testing.T) {
	var kz kustomization
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(k8sDir, "kustomization.yaml"))), &kz); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && b != secretExample {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(kz.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml resources %v, want every manifest but %s: %v", got, secretExample, want)
	}
	if slices.Contains(kz.Resources, secretExample) {
		t.Errorf("kustomization.yaml applies %s: its placeholders would overwrite the real Secret", secretExample)
	}
	d := loadDeployment(t)
	repo, _, _ := strings.Cut(d.c.Image, ":")
	if !slices.ContainsFunc(kz.Images, func(i struct {
		Name string `yaml:"name"`
	}) bool {
		return i.Name == repo
	}) {
		t.Errorf("kustomization.yaml images: none named %s, the StatefulSet's image", repo)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not found: kustomize build not tried")
		return
	}
	if out, err := exec.Command(kubectl, "kustomize", k8sDir).CombinedOutput(); err != nil {
		t.Errorf("kubectl kustomize %s: %v\n%s", k8sDir, err, out)
	}
}

func TestKubernetesStatefulSet(t *testing.T) {
	d := loadDeployment(t)
	const where = "statefulset.yaml"
	spec := d.sts.Spec
	if spec.Replicas != 3 {
		t.Errorf("%s: replicas %d, want 3", where, spec.Replicas)
	}
	labels := spec.Template.Metadata.Labels
	if !subset(spec.Selector.MatchLabels, labels) || len(spec.Selector.MatchLabels) == 0 {
		t.Errorf("%s: selector %v does not select the pod labels %v", where, spec.Selector.MatchLabels, labels)
	}
	var headless service
	d.one(t, "Service", spec.ServiceName, &headless)

	// A stable name per member (tokenring counts the membership by name),
	// the pod IP advertised, the headless Service joined on the gossip port.
	if v := d.rawArg("name"); v != "$(POD_NAME)" || d.fieldOf("POD_NAME") != "metadata.name" {
		t.Errorf("%s: -name %q: want $(POD_NAME) from metadata.name, the pod's stable StatefulSet name", where, v)
	}
	hasFlag(t, "advertise")
	if v := d.rawArg("advertise"); v != "$(POD_IP)" || d.fieldOf("POD_IP") != "status.podIP" {
		t.Errorf("%s: -advertise %q: want $(POD_IP) from status.podIP", where, v)
	}
	wantJoin := fmt.Sprintf("%s.$(POD_NAMESPACE).svc.cluster.local:%d", spec.ServiceName, d.ports.Gossip)
	if v := d.rawArg("join"); v != wantJoin || d.fieldOf("POD_NAMESPACE") != "metadata.namespace" {
		t.Errorf("%s: -join %q: want %q (POD_NAMESPACE from metadata.namespace)", where, v, wantJoin)
	}

	// Every listener is a containerPort, and every containerPort a listener.
	want := map[string]int{"TCP/" + strconv.Itoa(d.ports.HTTP): 1, "TCP/" + strconv.Itoa(d.ports.Gossip): 1,
		"UDP/" + strconv.Itoa(d.ports.Gossip): 1, "TCP/" + strconv.Itoa(d.ports.Peer): 1}
	for _, p := range d.c.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = "TCP"
		}
		key := proto + "/" + strconv.Itoa(p.ContainerPort)
		if want[key] != 1 {
			t.Errorf("%s: containerPort %s (%s) is not one of -http, -gossip, -peer (%+v) or is listed twice", where, key, p.Name, d.ports)
		}
		want[key]++
	}
	for k, n := range want {
		if n == 1 {
			t.Errorf("%s: no containerPort %s", where, k)
		}
	}

	for _, pr := range []struct {
		name, path string
		p          *probe
	}{{"readinessProbe", "/readyz", d.c.ReadinessProbe}, {"livenessProbe", "/healthz", d.c.LivenessProbe}, {"startupProbe", "/healthz", d.c.StartupProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("%s: no %s httpGet", where, pr.name)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path {
			t.Errorf("%s: %s path %s, want %s", where, pr.name, pr.p.HTTPGet.Path, pr.path)
		}
		if port := d.containerPort(t, where+" "+pr.name, pr.p.HTTPGet.Port, "TCP"); port != d.ports.HTTP {
			t.Errorf("%s: %s port %v is %d, want -http's %d", where, pr.name, pr.p.HTTPGet.Port, port, d.ports.HTTP)
		}
	}

	pod := spec.Template.Spec
	if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != d.img.UID {
		t.Errorf("%s: pod securityContext: want runAsNonRoot and runAsUser %d (the image's USER)", where, d.img.UID)
	}
	sc := d.c.SecurityContext
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: container securityContext: want allowPrivilegeEscalation false, readOnlyRootFilesystem, capabilities drop ALL", where)
	}
	for _, r := range []string{"cpu", "memory"} {
		if d.c.Resources.Requests[r] == "" {
			t.Errorf("%s: no resources.requests.%s", where, r)
		}
	}
	limit := bytesOf(t, d.c.Resources.Limits["memory"])
	if limit == 0 {
		t.Errorf("%s: no resources.limits.memory", where)
	}
	env := d.env(t, where, nil)
	if gml := env["GOMEMLIMIT"]; gml != "" && bytesOf(t, gml) >= limit {
		t.Errorf("%s: GOMEMLIMIT %s is not below the memory limit %s", where, gml, d.c.Resources.Limits["memory"])
	}
}

// preStop returns the preStop hook's sleep (0 without one).
func (d deployment) preStop() time.Duration {
	if ps := d.c.Lifecycle.PreStop; ps != nil && ps.Sleep != nil {
		return time.Duration(ps.Sleep.Seconds) * time.Second
	}
	return 0
}

// TestKubernetesShutdown: terminationGracePeriodSeconds covers the preStop
// sleep, the config's drain and the handoff's timeouts.
func TestKubernetesShutdown(t *testing.T) {
	d := loadDeployment(t)
	cfg := loadConfig(t, "configmap.yaml", d.configText(t), d.env(t, "statefulset.yaml", nil))
	preStop := d.preStop()
	if preStop == 0 {
		t.Errorf("statefulset.yaml: no preStop sleep")
	}
	grace := d.sts.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil {
		t.Fatal("statefulset.yaml: no terminationGracePeriodSeconds (the default 30 s is not derived from the drain)")
	}
	need := preStop + cfg.Drain + stopBudget(t) + stopMargin
	if got := time.Duration(*grace) * time.Second; got < need {
		t.Errorf("statefulset.yaml: terminationGracePeriodSeconds %v < preStop %v + drain %v + handoff and shutdown %v + margin %v = %v",
			got, preStop, cfg.Drain, stopBudget(t), stopMargin, need)
	}
	t.Logf("grace %ds >= preStop %v + drain %v + handoff and shutdown %v + margin %v", *grace, preStop, cfg.Drain, stopBudget(t), stopMargin)
}

func TestKubernetesConfig(t *testing.T) {
	d := loadDeployment(t)
	text := d.configText(t)
	env := d.env(t, "statefulset.yaml", nil)
	cfg := loadConfig(t, "configmap.yaml "+d.cmKey, text, env)
	if len(cfg.Limits.Tenants) == 0 && len(cfg.Pools) == 0 {
		t.Errorf("configmap.yaml: sets no tenant or pool limits")
	}
	checkEnvNames(t, "statefulset.yaml env", env, d.cmdLine, configRefs(text))
	for k, v := range d.cm.Data {
		if strings.Contains(v, "REPLACE-ME") || strings.Contains(strings.ToLower(k), "secret") {
			t.Errorf("configmap.yaml: %s looks like a credential: put it in the Secret and reference it as ${NAME}", k)
		}
	}
}

func TestKubernetesSecret(t *testing.T) {
	d := loadDeployment(t)
	if len(d.secret.Data) > 0 {
		t.Errorf("%s: data: use stringData with visible placeholders", secretExample)
	}
	if len(d.secret.StringData) == 0 {
		t.Errorf("%s: no stringData", secretExample)
	}
	for k, v := range d.secret.StringData {
		if !placeholder(v) {
			t.Errorf("%s: %s is not a REPLACE-ME placeholder: never commit a real credential", secretExample, k)
		}
	}
	used := map[string]bool{}
	for _, e := range d.c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			used[e.ValueFrom.SecretKeyRef.Key] = true
		}
	}
	for k := range d.secret.StringData {
		if !used[k] {
			t.Errorf("%s: %s is not used by the StatefulSet", secretExample, k)
		}
	}
}

func TestKubernetesServices(t *testing.T) {
	d := loadDeployment(t)
	labels := d.sts.Spec.Template.Metadata.Labels
	var headless, client service
	d.one(t, "Service", d.sts.Spec.ServiceName, &headless)
	if headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: want clusterIP None (headless) and publishNotReadyAddresses (the first member joins itself)", d.sts.Spec.ServiceName)
	}
	var clients []k8sObject
	for _, o := range d.objects {
		if o.Kind == "Service" && o.Metadata.Name != d.sts.Spec.ServiceName {
			clients = append(clients, o)
		}
	}
	if len(clients) != 1 {
		t.Fatalf("want one client Service besides %s, got %d", d.sts.Spec.ServiceName, len(clients))
	}
	d.one(t, "Service", clients[0].Metadata.Name, &client)

	check := func(name string, s service, want map[string]int) {
		if !subset(s.Spec.Selector, labels) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s: selector %v does not select the pods %v", name, s.Spec.Selector, labels)
		}
		got := map[string]int{}
		for _, p := range s.Spec.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = "TCP"
			}
			target := d.containerPort(t, "Service "+name, orElse(p.TargetPort, any(p.Port)), proto)
			if target != p.Port {
				t.Errorf("Service %s: port %d targets %d: keep them equal, the flags' ports", name, p.Port, target)
			}
			got[proto+"/"+strconv.Itoa(target)]++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Service %s: ports %v, want %v", name, got, want)
		}
	}
	check(d.sts.Spec.ServiceName, headless, map[string]int{
		"TCP/" + strconv.Itoa(d.ports.Gossip): 1, "UDP/" + strconv.Itoa(d.ports.Gossip): 1, "TCP/" + strconv.Itoa(d.ports.Peer): 1})
	check(clients[0].Metadata.Name, client, map[string]int{"TCP/" + strconv.Itoa(d.ports.HTTP): 1})
}

func TestKubernetesPDB(t *testing.T) {
	d := loadDeployment(t)
	var p pdb
	d.one(t, "PodDisruptionBudget", "", &p)
	if p.Spec.MaxUnavailable != 1 || p.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v (minAvailable %v), want maxUnavailable 1", p.Spec.MaxUnavailable, p.Spec.MinAvailable)
	}
	if !subset(p.Spec.Selector.MatchLabels, d.sts.Spec.Template.Metadata.Labels) || len(p.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("PodDisruptionBudget: selector %v does not select the pods", p.Spec.Selector.MatchLabels)
	}
}

// TestKubernetesNetworkPolicy: gossip and peer ports open only to the
// members, the client port only to pods labelled as its clients (and the
// label documented in the policy's comment).
func TestKubernetesNetworkPolicy(t *testing.T) {
	checkNetworkPolicy(t, loadDeployment(t))
	text := readFile(t, "kubernetes/networkpolicy.yaml")
	if !strings.Contains(text, "# ") || !strings.Contains(text, clientLabel+"=true") {
		t.Errorf("networkpolicy.yaml: its comment does not say how to label a client pod (%s=true)", clientLabel)
	}
	if strings.Contains(strings.ToLower(text), "no authentication") || strings.Contains(strings.ToLower(text), "unauthenticated") {
		t.Errorf("networkpolicy.yaml: says gossip or peers are unauthenticated; cluster_secret authenticates both")
	}
}

// checkNetworkPolicy: d's NetworkPolicy selects its pods and admits the
// client port only from pods labelled clientLabel, gossip and peers only
// from the members, and nothing else.
func checkNetworkPolicy(t *testing.T, d deployment) {
	t.Helper()
	labels := d.sts.Spec.Template.Metadata.Labels
	var np networkPolicy
	d.one(t, "NetworkPolicy", "", &np)
	if !subset(np.Spec.PodSelector.MatchLabels, labels) || len(np.Spec.PodSelector.MatchLabels) == 0 {
		t.Errorf("NetworkPolicy: podSelector does not select the pods")
	}
	clients := map[string]string{clientLabel: "true"}
	open := map[string]string{} // proto/port -> "members", "clients", "others" or "all"
	for _, rule := range np.Spec.Ingress {
		who := "all"
		for i, f := range rule.From {
			w := "others"
			switch {
			case f.PodSelector != nil && len(f.PodSelector.MatchLabels) > 0 && subset(f.PodSelector.MatchLabels, labels):
				w = "members"
			case f.PodSelector != nil && fmt.Sprint(f.PodSelector.MatchLabels) == fmt.Sprint(clients):
				w = "clients"
			}
			if i > 0 && w != who {
				w = "others"
			}
			who = w
		}
		for _, p := range rule.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = "TCP"
			}
			open[fmt.Sprintf("%s/%d", proto, d.containerPort(t, "NetworkPolicy", p.Port, proto))] = who
		}
	}
	want := map[string]string{
		"TCP/" + strconv.Itoa(d.ports.HTTP): "clients", "TCP/" + strconv.Itoa(d.ports.Gossip): "members",
		"UDP/" + strconv.Itoa(d.ports.Gossip): "members", "TCP/" + strconv.Itoa(d.ports.Peer): "members",
	}
	if fmt.Sprint(open) != fmt.Sprint(want) {
		t.Errorf("NetworkPolicy: ingress %v, want %v", open, want)
	}
}

// clientLabel is the label networkpolicy.yaml admits to the client port.
const clientLabel = "tokenring.io/client"

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func orElse(a, b any) any {
	if a != nil {
		return a
	}
	return b
}

// bytesOf parses a Kubernetes quantity ("512Mi") or a GOMEMLIMIT ("450MiB").
func bytesOf(t *testing.T, q string) int64 {
	t.Helper()
	if q == "" {
		return 0
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
		{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Errorf("quantity %q: %v", q, err)
			}
			return v * u.mult
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		t.Errorf("quantity %q: %v", q, err)
	}
	return v
}

// freePort returns a loopback port nobody listens on, TCP and UDP.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}
