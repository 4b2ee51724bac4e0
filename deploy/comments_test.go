package deploy

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tokenring/tokenring/config"
)

// commentSentences returns the sentences of the comments (# lines) of
// every shipped file under deploy/ (tests and Go files aside), by file.
func commentSentences(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		var comment strings.Builder
		for line := range strings.Lines(readFile(t, path)) {
			if _, c, ok := strings.Cut(line, "#"); ok {
				comment.WriteString(strings.TrimSpace(c) + " ")
			}
		}
		for s := range strings.SplitSeq(comment.String(), ". ") {
			if s = strings.Join(strings.Fields(s), " "); s != "" {
				out[path] = append(out[path], s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	clusterPorts = regexp.MustCompile(`(?i)\b(gossip|peers?|peer protocol|7946|7947)\b`)
	insecureWord = regexp.MustCompile(`(?i)unauthenticated|not authenticated|no authentication|plaintext|unencrypted|not encrypted|anyone can join`)
)

// TestDeployCommentsMatchCode: what the comments under deploy/ claim is
// what the code does.
//
//   - The shipped configs set cluster_secret, which authenticates and
//     encrypts gossip and the peer protocol: no comment may call them
//     unauthenticated or plaintext, except as what happens without the
//     secret.
//   - configmap.yaml's account of ${NAME} expansion (an unset or empty
//     variable stops tokenringd at start naming the field, ${NAME:-default}
//     and ${NAME:-} give a default, a reference in a comment is ignored)
//     is what config.Load does, run on the shipped config.
func TestDeployCommentsMatchCode(t *testing.T) {
	for file, sentences := range commentSentences(t) {
		for _, s := range sentences {
			if clusterPorts.MatchString(s) && insecureWord.MatchString(s) && !strings.Contains(strings.ToLower(s), "without") {
				t.Errorf("%s: %q: cluster_secret authenticates and encrypts gossip and the peer protocol", file, s)
			}
		}
	}
	d := loadDeployment(t)
	if cfg := loadConfig(t, "configmap.yaml", d.configText(t), d.env(t, "statefulset.yaml", nil)); cfg.ClusterSecret == "" {
		t.Fatal("configmap.yaml: no cluster_secret: the comments' claims about authenticated gossip and peers are false")
	}

	cm := strings.Join(strings.Fields(readFile(t, filepath.Join(k8sDir, "configmap.yaml"))), " ")
	claims := []string{
		"A ${NAME} whose # variable is unset or empty stops the daemon at start with an error naming # the field",
		"write # ${NAME:-default} for a default, ${NAME:-} for a deliberate empty value",
		"An unset reference inside a comment is ignored",
	}
	for _, c := range claims {
		if !strings.Contains(cm, strings.Join(strings.Fields(c), " ")) {
			t.Errorf("configmap.yaml no longer says %q: update this test with the comment", c)
		}
	}
	example := regexp.MustCompile(`\("([a-z_]+): \$\{([A-Z_]+)\} is not set"\)`).FindStringSubmatch(cm)
	if example == nil {
		t.Fatal(`configmap.yaml: no example error ("field: ${NAME} is not set")`)
	}
	field, name := example[1], example[2]
	text := d.configText(t)
	env := d.env(t, "statefulset.yaml", nil)
	for _, v := range []string{"unset", ""} {
		e := map[string]string{}
		for k, x := range env {
			e[k] = x
		}
		if v == "unset" {
			delete(e, name)
		} else {
			e[name] = v
		}
		_, err := config.Parse([]byte(text), func(k string) string { return e[k] })
		if want := field + ": ${" + name + "} is not set"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("configmap.yaml with %s %s: %v, want an error saying %q as its comment does", name, v, err, want)
		}
	}
	getenv := func(k string) string { return env[k] }
	withDefault := text + "\n# ${TOKENRING_NOT_SET_ANYWHERE}\n"
	withDefault = strings.Replace(withDefault, "${"+name+"}", "${TOKENRING_NOT_SET_ANYWHERE:-fallback-token}", 1)
	cfg, err := config.Parse([]byte(withDefault), getenv)
	if err != nil || cfg.AdminToken != "fallback-token" && field == "admin_token" {
		t.Errorf("${NAME:-default} and a reference in a comment: %v (admin_token %q)", err, cfg.AdminToken)
	}
	empty := strings.Replace(text, "${"+name+"}", "${TOKENRING_NOT_SET_ANYWHERE:-}", 1)
	if _, err := config.Parse([]byte(empty), getenv); err != nil {
		t.Errorf("${NAME:-}: %v, want a deliberate empty value", err)
	}
}
