package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestProtectedMode: the image's ENTRYPOINT binds 0.0.0.0, so tokenringd
// started with it and neither a cluster secret nor client tokens refuses to
// start (exit status 2, before binding anything), naming the fix; and every
// deployment gives it the cluster secret: the StatefulSet and the systemd
// env file set TOKENRING_CLUSTER_SECRET, which their configs use as
// cluster_secret.
func TestProtectedMode(t *testing.T) {
	img := checkDockerfile(t)
	cmd := exec.Command(tokenringd, img.Entrypoint[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "protected mode") ||
		!strings.Contains(stderr.String(), "TOKENRING_CLUSTER_SECRET") {
		t.Fatalf("tokenringd %q without a secret: %v, %q; want exit 2 naming protected mode and TOKENRING_CLUSTER_SECRET", img.Entrypoint[1:], err, stderr.String())
	}

	d := loadDeployment(t)
	set := false
	for _, e := range d.c.Env {
		set = set || (e.Name == "TOKENRING_CLUSTER_SECRET" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil)
	}
	if !set {
		t.Errorf("the StatefulSet does not set TOKENRING_CLUSTER_SECRET from the Secret")
	}
	if !strings.Contains(d.configText(t), `cluster_secret: "${TOKENRING_CLUSTER_SECRET}"`) {
		t.Errorf("the ConfigMap's config does not use ${TOKENRING_CLUSTER_SECRET} as cluster_secret")
	}
	if _, ok := readEnvFile(t, unitEnvFile)["TOKENRING_CLUSTER_SECRET"]; !ok {
		t.Errorf("%s does not set TOKENRING_CLUSTER_SECRET", unitEnvFile)
	}
	if !strings.Contains(readFile(t, unitConfig), `cluster_secret: "${TOKENRING_CLUSTER_SECRET}"`) {
		t.Errorf("%s does not use ${TOKENRING_CLUSTER_SECRET} as cluster_secret", unitConfig)
	}
}
