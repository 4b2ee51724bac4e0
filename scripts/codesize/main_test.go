package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goFunc returns the source of a function named name that is exactly
// lines lines long, from its func keyword to its closing brace.
func goFunc(name string, lines int) string {
	var b strings.Builder
	b.WriteString("func " + name + "() {\n")
	for range lines - 2 {
		b.WriteString("\t_ = 0\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// goFile returns a file of package p holding body, padded with comment
// lines to exactly lines lines (if body is shorter).
func goFile(body string, lines int) string {
	src := "package p\n\n" + body
	if pad := lines - strings.Count(src, "\n"); pad > 0 {
		src += strings.Repeat("// padding\n", pad)
	}
	return src
}

// writeTree creates the files (slash-separated path → contents) under a
// new temporary directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, src := range files {
		full := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCodesize(t *testing.T) {
	tests := []struct {
		name       string
		files      map[string]string
		args       []string // besides -root
		wantOut    string
		wantStatus int
	}{
		{
			name: "within limits",
			files: map[string]string{
				"a/a.go": goFile(goFunc("f", 80), 600),
			},
			wantStatus: 0,
		},
		{
			name: "long function and long file",
			files: map[string]string{
				"a/a.go":              goFile(goFunc("short", 3)+goFunc("tooLong", 81), 10),
				"b/b.go":              goFile("", 601),
				"b/b_test.go":         goFile(goFunc("testsMayBeLong", 200), 700),
				".git/x.go":           goFile(goFunc("hidden", 200), 700),
				"testdata/x.go":       goFile(goFunc("data", 200), 700),
				"node_modules/m/x.go": goFile(goFunc("vendored", 200), 700),
			},
			wantOut: "b/b.go: 601 lines (max 600)\n" +
				"a/a.go:6: func tooLong is 81 lines (max 80)\n",
			wantStatus: 1,
		},
		{
			name: "methods are measured, doc comments are not",
			files: map[string]string{
				"m.go": "package p\n\ntype T struct{}\n\n// long is documented\n// over two lines.\n" +
					strings.Replace(goFunc("long", 12), "func long", "func (T) long", 1),
			},
			args:       []string{"-max-func", "11"},
			wantOut:    "m.go:7: func long is 12 lines (max 11)\n",
			wantStatus: 1,
		},
		{
			name: "flags set the limits",
			files: map[string]string{
				"a.go": goFile(goFunc("f", 5), 20),
			},
			args: []string{"-max-file", "19", "-max-func", "4"},
			wantOut: "a.go: 20 lines (max 19)\n" +
				"a.go:3: func f is 5 lines (max 4)\n",
			wantStatus: 1,
		},
		{
			name: "unparsable file",
			files: map[string]string{
				"bad.go": "package p\nfunc {\n",
			},
			wantStatus: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, tt.files)
			var stdout, stderr bytes.Buffer
			status := exitCode(append([]string{"-root", root}, tt.args...), &stdout, &stderr)
			if status != tt.wantStatus {
				t.Errorf("exit status %d, want %d (stderr %q)", status, tt.wantStatus, stderr.String())
			}
			if got := stdout.String(); got != tt.wantOut {
				t.Errorf("output:\n%s\nwant:\n%s", got, tt.wantOut)
			}
			if tt.wantStatus != 2 && stderr.Len() > 0 {
				t.Errorf("unexpected stderr %q", stderr.String())
			}
		})
	}
}

func TestLineCount(t *testing.T) {
	for src, want := range map[string]int{"": 0, "a": 1, "a\n": 1, "a\nb": 2, "a\nb\n": 2, "\n\n": 2} {
		if got := lineCount([]byte(src)); got != want {
			t.Errorf("lineCount(%q) = %d, want %d", src, got, want)
		}
	}
}
