package deploy

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dockerInstr is one Dockerfile instruction, continuation lines joined.
type dockerInstr struct {
	Line int
	Cmd  string // upper case
	Args string
}

// dockerStage is one FROM and what follows it.
type dockerStage struct {
	Image, Name string
	Instrs      []dockerInstr
}

// dockerfile is deploy/Dockerfile, parsed.
type dockerfile struct {
	Args   map[string]string // ARG defaults before the first FROM
	Stages []dockerStage
}

// final returns the last stage: the image.
func (d dockerfile) final() dockerStage { return d.Stages[len(d.Stages)-1] }

// all returns the stage's instructions of kind cmd.
func (s dockerStage) all(cmd string) []dockerInstr {
	var out []dockerInstr
	for _, in := range s.Instrs {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

var dockerVar = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

func parseDockerfile(t *testing.T, file string) dockerfile {
	t.Helper()
	d := dockerfile{Args: map[string]string{}}
	var cur strings.Builder
	start := 0
	for n, line := range strings.Split(readFile(t, file), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // comments may sit inside a continued instruction
		}
		if cur.Len() == 0 {
			start = n + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := dockerInstr{Line: start, Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)}
		switch {
		case in.Cmd == "FROM":
			words := strings.Fields(in.Args)
			words = slices.DeleteFunc(words, func(w string) bool { return strings.HasPrefix(w, "--") })
			st := dockerStage{Image: dockerVar.ReplaceAllStringFunc(words[0], func(v string) string {
				return d.Args[dockerVar.FindStringSubmatch(v)[1]]
			})}
			if len(words) == 3 && strings.EqualFold(words[1], "AS") {
				st.Name = words[2]
			}
			d.Stages = append(d.Stages, st)
		case len(d.Stages) == 0 && in.Cmd == "ARG":
			k, v, _ := strings.Cut(in.Args, "=")
			d.Args[k] = v
		case len(d.Stages) > 0:
			d.Stages[len(d.Stages)-1].Instrs = append(d.Stages[len(d.Stages)-1].Instrs, in)
		}
	}
	if len(d.Stages) == 0 {
		t.Fatalf("%s: no FROM", file)
	}
	return d
}

// image is what the Dockerfile tells about the image it builds.
type image struct {
	Entrypoint []string // exec form
	UID, GID   int
	Exposed    []string // "8080/tcp", sorted
	Ports      ports    // of the ENTRYPOINT's flags
}

// checkDockerfile checks deploy/Dockerfile statically (docker is not
// needed) and returns what Kubernetes needs to know of the image.
func checkDockerfile(t *testing.T) image {
	t.Helper()
	const file = "Dockerfile"
	d := parseDockerfile(t, file)
	if len(d.Stages) < 2 {
		t.Fatalf("%s: want a multi-stage build (a Go stage, then a minimal one), got %d stage(s)", file, len(d.Stages))
	}
	final := d.final()
	if !strings.HasPrefix(final.Image, "gcr.io/distroless/static") && final.Image != "scratch" {
		t.Errorf("%s: final stage FROM %s: want gcr.io/distroless/static* or scratch", file, final.Image)
	}
	if runs := final.all("RUN"); len(runs) > 0 {
		t.Errorf("%s:%d: RUN in the final stage: it has no shell", file, runs[0].Line)
	}

	// The build stage: the one the final stage copies from.
	var copied []string // destination paths of binaries copied from it
	var build *dockerStage
	for _, in := range final.all("COPY") {
		words := strings.Fields(in.Args)
		from := ""
		for _, w := range words {
			if v, ok := strings.CutPrefix(w, "--from="); ok {
				from = v
			}
		}
		if from == "" {
			continue
		}
		for i := range d.Stages[:len(d.Stages)-1] {
			if d.Stages[i].Name == from {
				build = &d.Stages[i]
			}
		}
		words = slices.DeleteFunc(words, func(w string) bool { return strings.HasPrefix(w, "--") })
		dest := words[len(words)-1]
		for _, src := range words[:len(words)-1] {
			if strings.HasSuffix(dest, "/") {
				copied = append(copied, path.Join(dest, path.Base(src)))
			} else {
				copied = append(copied, dest)
			}
		}
	}
	if build == nil {
		t.Fatalf("%s: the final stage copies nothing from a named build stage", file)
	}
	checkBuildStage(t, file, *build)
	for _, bin := range []string{"tokenringd", "tokenring"} {
		if !slices.ContainsFunc(copied, func(p string) bool { return path.Base(p) == bin }) {
			t.Errorf("%s: the final stage does not copy %s from the build stage (copies %v)", file, bin, copied)
		}
	}

	var img image
	users := final.all("USER")
	if len(users) == 0 {
		t.Fatalf("%s: no USER in the final stage: the image would run as root", file)
	}
	uid, gid, _ := strings.Cut(users[len(users)-1].Args, ":")
	var err error
	if img.UID, err = strconv.Atoi(uid); err != nil || img.UID == 0 {
		t.Errorf("%s: USER %s: want a numeric non-root uid (Kubernetes' runAsNonRoot cannot check a name)", file, users[len(users)-1].Args)
	}
	if gid != "" {
		img.GID, _ = strconv.Atoi(gid)
	}

	eps := final.all("ENTRYPOINT")
	if len(eps) != 1 {
		t.Fatalf("%s: want one ENTRYPOINT in the final stage, got %d", file, len(eps))
	}
	if err := json.Unmarshal([]byte(eps[0].Args), &img.Entrypoint); err != nil || len(img.Entrypoint) == 0 {
		t.Fatalf("%s:%d: ENTRYPOINT %s: want the exec form [\"/path/tokenringd\", flags...] (no shell): %v", file, eps[0].Line, eps[0].Args, err)
	}
	if bin := img.Entrypoint[0]; path.Base(bin) != "tokenringd" || !slices.Contains(copied, bin) {
		t.Errorf("%s: ENTRYPOINT runs %s: want the tokenringd copied from the build stage (%v)", file, bin, copied)
	}
	if cmds := final.all("CMD"); len(cmds) > 0 {
		t.Errorf("%s:%d: CMD: put the container's flags in ENTRYPOINT; Kubernetes args and docker run arguments are appended to it", file, cmds[0].Line)
	}
	c := parseCommandLine(t, file+" ENTRYPOINT", img.Entrypoint[1:])
	img.Ports = listenPorts(t, c)

	for _, in := range final.all("EXPOSE") {
		for _, p := range strings.Fields(in.Args) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			img.Exposed = append(img.Exposed, strings.ToLower(p))
		}
	}
	slices.Sort(img.Exposed)
	want := []string{
		fmt.Sprintf("%d/tcp", img.Ports.HTTP), fmt.Sprintf("%d/tcp", img.Ports.Gossip),
		fmt.Sprintf("%d/udp", img.Ports.Gossip), fmt.Sprintf("%d/tcp", img.Ports.Peer),
	}
	slices.Sort(want)
	if !slices.Equal(img.Exposed, want) {
		t.Errorf("%s: EXPOSE %v, want the ENTRYPOINT's -http, -gossip (tcp and udp) and -peer: %v", file, img.Exposed, want)
	}
	return img
}

// checkBuildStage: a static, reproducible build of both commands, with a Go
// at least as new as go.mod asks for.
func checkBuildStage(t *testing.T, file string, st dockerStage) {
	t.Helper()
	repo, tag, _ := strings.Cut(st.Image, ":")
	if repo != "golang" {
		t.Errorf("%s: build stage FROM %s: want golang:<version>", file, st.Image)
	} else if want := goModVersion(t); versionLess(tag, want) {
		t.Errorf("%s: build stage FROM %s: go.mod says go %s (the image does not download toolchains)", file, st.Image, want)
	}
	var build string
	for _, in := range st.all("RUN") {
		if strings.Contains(in.Args, "go build") {
			build = in.Args
		}
	}
	words := strings.Fields(build)
	for _, w := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/tokenringd", "./cmd/tokenring"} {
		if !slices.Contains(words, w) {
			t.Errorf("%s: the build stage's go build (%q) lacks %s", file, build, w)
		}
	}
}

func goModVersion(t *testing.T) string {
	t.Helper()
	for line := range strings.Lines(readFile(t, "../go.mod")) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return v
		}
	}
	t.Fatal("go.mod has no go line")
	return ""
}

// versionLess compares dotted versions numerically ("1.26" < "1.26.8");
// a tag with a suffix ("1.26.8-bookworm") is compared by its version.
func versionLess(a, b string) bool {
	a, _, _ = strings.Cut(a, "-")
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func TestDockerfile(t *testing.T) {
	checkDockerfile(t)
}

// TestDockerignore: the ignore file keeps nothing out that the build needs.
func TestDockerignore(t *testing.T) {
	const file = "Dockerfile.dockerignore"
	out, err := exec.Command(goTool(), "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", "../cmd/tokenringd", "../cmd/tokenring").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, dir := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
			needed = append(needed, filepath.ToSlash(rel))
		}
	}
	for line := range strings.Lines(readFile(t, file)) {
		pat := strings.TrimSpace(line)
		if pat == "" || pat[0] == '#' || pat[0] == '!' {
			continue
		}
		for _, p := range needed {
			for dir := p; dir != "."; dir = path.Dir(dir) {
				if ok, _ := path.Match(strings.TrimPrefix(pat, "**/"), dir); ok {
					t.Errorf("%s: %q excludes %s, which the build needs", file, pat, p)
				}
			}
		}
	}
}
