package descriptors

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// MaxFileSize is the largest configuration file Load reads.
const MaxFileSize = 16 << 20

// Error is a configuration the reference refuses, or one that misuses
// tokenring's extensions. Parse and Load return the first one they find.
type Error struct {
	File string // the file's name, as given to Parse (Load: its name in the directory)
	Line int    // the line in the file, 1 first; 0 when unknown
	// Path is where in the file, as YAML keys and list indexes:
	// "descriptors[1].descriptors[0].rate_limit.unit"; "" for the whole file.
	Path string
	// Descriptor is the descriptor's composite key, as the reference names
	// it ("messaging.message_type_marketing.to_number"); "" when the error
	// is not about one descriptor, or the descriptor has no key.
	Descriptor string
	Msg        string // what is wrong, in the reference's words where it has some
}

// Error returns "file:line: path (descriptor): msg", leaving out what is
// unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		if e.Descriptor != "" {
			b.WriteString(" (")
			b.WriteString(e.Descriptor)
			b.WriteByte(')')
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads every configuration file of directory dir and parses them
// together (Parse), each named by its name in dir. A configuration file is
// an entry of dir (not of its subdirectories) whose name ends in ".yaml" or
// ".yml" and does not start with '.', and which is, or is a symbolic link
// to, a regular file: Kubernetes mounts a ConfigMap's files as links into a
// hidden "..data" directory, which is read through the links and not
// itself. (The reference's loader reads every file of its directory tree,
// dot files too unless RUNTIME_IGNOREDOTFILES; mount only configuration
// files there.) A file larger than MaxFileSize is an error.
func Load(dir string) (*Config, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rate limit configuration: %w", err)
	}
	files := make(map[string][]byte)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		info, err := os.Stat(path) // through a link
		if err != nil {
			return nil, fmt.Errorf("rate limit configuration: %w", err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		content, err := readAtMost(path, MaxFileSize)
		if err != nil {
			return nil, fmt.Errorf("rate limit configuration: %w", err)
		}
		files[name] = content
	}
	return Parse(files)
}

// readAtMost returns the content of the file at path, or an error if it is
// longer than limit bytes.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	content, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(content)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return content, nil
}

// Parse reads configuration files, each a file name and its content, into
// one Config. Files are read in the order of their names, so the first
// error of several is always the same one; an error is an *Error. No files
// give a Config without domains.
func Parse(files map[string][]byte) (*Config, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	// The reference reads every file before it loads any (file_provider.go).
	docs := make([]*fileDoc, len(names))
	for i, name := range names {
		doc, err := readFile(name, files[name])
		if err != nil {
			return nil, err
		}
		docs[i] = doc
	}
	c := &Config{domains: make(map[string]*node)}
	domainFile := make(map[string]string)
	for i, doc := range docs {
		name := names[i]
		if doc.domain == "" {
			return nil, &Error{File: name, Line: doc.domainLine, Path: "domain", Msg: "config file cannot have empty domain"}
		}
		if first, dup := domainFile[doc.domain]; dup {
			return nil, &Error{File: name, Line: doc.domainLine, Path: "domain",
				Msg: fmt.Sprintf("duplicate domain '%s' in config file (first in %s)", doc.domain, first)}
		}
		domainFile[doc.domain] = name
		root := &node{children: make(map[string]*node)}
		if err := load(name, root, doc.domain+".", doc.descriptors); err != nil {
			return nil, err
		}
		c.domains[doc.domain] = root
	}
	c.hash = digest(c.domains)
	return c, nil
}

// load adds descriptors ds to the tree under parent, whose composite key,
// with a trailing dot, is parentKey: the reference's loadDescriptors, its
// checks in its order, then tokenring's.
func load(file string, parent *node, parentKey string, ds []descDoc) error {
	for _, d := range ds {
		if d.key == "" {
			return &Error{File: file, Line: d.line, Path: d.path, Msg: "descriptor has empty key"}
		}
		// Value is optional: the composite key is the key alone or key_value.
		key := d.key
		if d.value != "" {
			key += "_" + d.value
		}
		full := parentKey + key
		fail := func(line int, path, format string, args ...any) error {
			return &Error{File: file, Line: line, Path: path, Descriptor: full, Msg: fmt.Sprintf(format, args...)}
		}
		if _, dup := parent.children[key]; dup {
			return fail(d.line, d.path, "duplicate descriptor composite key '%s'", full)
		}
		n := &node{children: make(map[string]*node), key: key, valueToMetric: d.valueToMetric, shareThreshold: d.shareThreshold}
		if rl := d.rateLimit; rl != nil {
			l, msg := newLimit(rl, d, full)
			if msg != "" {
				return fail(rl.line, rl.path, "%s", msg)
			}
			n.limit = l
		}
		if d.shareThreshold && !strings.Contains(key, "*") {
			return fail(d.line, d.path, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", key)
		}
		if strings.Contains(key, "*") {
			parent.wildcards = append(parent.wildcards, wildcard{key: key, parts: strings.Split(key, "*")})
		}
		if err := load(file, n, full+".", d.descriptors); err != nil {
			return err
		}
		parent.children[key] = n
	}
	return nil
}

// newLimit returns descriptor d's limit, whose rate_limit is rl and
// composite key full, or why there is none: the reference's checks of a
// rate_limit, then tokenring's.
func newLimit(rl *rateLimitDoc, d descDoc, full string) (*Limit, string) {
	unit, valid := ParseUnit(rl.unit)
	if rl.unlimited {
		if valid {
			return nil, "should not specify rate limit unit when unlimited"
		}
		unit = UnitUnknown
	} else if !valid {
		return nil, fmt.Sprintf("invalid rate limit unit '%s'", rl.unit)
	}
	for _, name := range rl.replaces {
		if name == "" {
			return nil, "should not have an empty replaces entry"
		}
		if name == rl.name {
			return nil, "replaces should not contain name of same descriptor"
		}
	}
	// tokenring's extensions.
	switch {
	case rl.tokensPerUnit < 0:
		return nil, fmt.Sprintf("tokens_per_unit %d is negative", rl.tokensPerUnit)
	case rl.concurrency < 0:
		return nil, fmt.Sprintf("concurrency %d is negative", rl.concurrency)
	case rl.unlimited && (rl.tokensPerUnit > 0 || rl.concurrency > 0 || rl.requestIDKey != ""):
		return nil, "an unlimited rate_limit cannot have tokens_per_unit, concurrency or request_id_key"
	case (rl.tokensPerUnit > 0 || rl.concurrency > 0) && rl.requestIDKey == "":
		return nil, "tokens_per_unit and concurrency need request_id_key, the key of the descriptor entry that carries the request id"
	}
	if rl.requestIDKey != "" {
		for _, c := range d.descriptors {
			if c.key == rl.requestIDKey {
				return nil, fmt.Sprintf("request_id_key '%s' is also the key of a nested descriptor (%s)", rl.requestIDKey, c.path)
			}
		}
	}
	return &Limit{
		Rule:            full,
		Stat:            full,
		Name:            rl.name,
		Unit:            unit,
		RequestsPerUnit: rl.requestsPerUnit,
		Unlimited:       rl.unlimited,
		ShadowMode:      d.shadowMode,
		QuotaMode:       d.quotaMode,
		DetailedMetric:  d.detailedMetric,
		Replaces:        slices.Clip(rl.replaces),
		TokensPerUnit:   rl.tokensPerUnit,
		Concurrency:     rl.concurrency,
		RequestIDKey:    rl.requestIDKey,
	}, ""
}
