// Command codesize enforces the module's size limits on non-test Go code:
// no file over -max-file lines and no function over -max-func lines.
//
// It walks the module from -root (skipping directories whose name starts
// with a dot, node_modules and testdata), prints every file and every
// function over its limit, one per line:
//
//	path: N lines (max 600)
//	path:line: func Name is N lines (max 80)
//
// and exits 1 if it printed anything, 2 if it could not read or parse the
// code, 0 otherwise. A function is measured from the line of its func
// keyword to the line of its closing brace, so its doc comment does not
// count; functions without a body (assembly stubs) are not measured.
//
// CI runs it through `make check`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Default limits, as the Makefile's check target states them.
const (
	defaultMaxFileLines = 600
	defaultMaxFuncLines = 80
)

func main() {
	os.Exit(exitCode(os.Args[1:], os.Stdout, os.Stderr))
}

// exitCode parses the command line args, runs the check and returns the
// process exit status: 0 if every limit holds, 1 if some do not (the
// offenders are printed on stdout), 2 on a usage, read or parse error
// (reported on stderr).
func exitCode(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("codesize", flag.ContinueOnError)
	flags.SetOutput(stderr)
	root := flags.String("root", ".", "the directory to walk")
	maxFile := flags.Int("max-file", defaultMaxFileLines, "the most lines a non-test .go file may have")
	maxFunc := flags.Int("max-func", defaultMaxFuncLines, "the most lines a non-test function may have")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "codesize: unexpected arguments %q\n", flags.Args())
		return 2
	}
	ok, err := run(*root, *maxFile, *maxFunc, stdout)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "codesize: %v\n", err)
		return 2
	case !ok:
		return 1
	}
	return 0
}

// run checks every non-test .go file under root. It prints first the files
// longer than maxFile lines, then the functions longer than maxFunc lines,
// each list in the order of the walk (lexical), with paths relative to root
// and slash-separated. ok is true when both lists are empty; err is set if
// a file could not be read or parsed, and then ok is false.
func run(root string, maxFile, maxFunc int, out io.Writer) (ok bool, err error) {
	paths, err := sourceFiles(root)
	if err != nil {
		return false, err
	}
	var longFiles, longFuncs []string
	fset := token.NewFileSet()
	for _, path := range paths {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return false, err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		if n := lineCount(src); n > maxFile {
			longFiles = append(longFiles, fmt.Sprintf("%s: %d lines (max %d)", rel, n, maxFile))
		}
		file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return false, err
		}
		for _, fn := range funcLengths(fset, file) {
			if fn.lines > maxFunc {
				longFuncs = append(longFuncs, fmt.Sprintf("%s:%d: func %s is %d lines (max %d)",
					rel, fn.line, fn.name, fn.lines, maxFunc))
			}
		}
	}
	for _, line := range append(longFiles, longFuncs...) {
		if _, err := fmt.Fprintln(out, line); err != nil {
			return false, err
		}
	}
	return len(longFiles) == 0 && len(longFuncs) == 0, nil
}

// sourceFiles returns the paths of the non-test .go files under root, in
// lexical order, leaving out directories whose name starts with a dot (but
// not root itself), node_modules and testdata.
func sourceFiles(root string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && isSkippedDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if isNonTestGoFile(d.Name()) && d.Type().IsRegular() {
			paths = append(paths, path)
		}
		return nil
	})
	return paths, err
}

// isSkippedDir reports whether a directory named name holds no code of the
// module's own: hidden directories, node_modules and testdata.
func isSkippedDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata"
}

// isNonTestGoFile reports whether a file named name is Go source that is
// not a test.
func isNonTestGoFile(name string) bool {
	return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
}

// lineCount returns the number of lines in src, counting a last line
// without a newline; it agrees with `wc -l` for files that end in one.
func lineCount(src []byte) int {
	n := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// funcLength is the extent of one function declaration.
type funcLength struct {
	name  string // the function's or method's name, without its receiver
	line  int    // the line of the func keyword
	lines int    // from the func keyword's line to the closing brace's, inclusive
}

// funcLengths returns the lengths of the functions and methods declared
// with a body in file, in source order.
func funcLengths(fset *token.FileSet, file *ast.File) []funcLength {
	var fns []funcLength
	for _, decl := range file.Decls {
		fn, isFunc := decl.(*ast.FuncDecl)
		if !isFunc || fn.Body == nil {
			continue
		}
		first := fset.Position(fn.Type.Func).Line
		last := fset.Position(fn.Body.Rbrace).Line
		fns = append(fns, funcLength{name: fn.Name.Name, line: first, lines: last - first + 1})
	}
	return fns
}
