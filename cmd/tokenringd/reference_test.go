package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/config"
)

// referenceFile is the configuration reference, from this package's
// folder; referenceDoc names it in messages.
const (
	referenceFile = "../../docs/configuration.md"
	referenceDoc  = "docs/configuration.md"
)

// TestReferenceListsEveryConfigFieldAndFlag: docs/configuration.md has a
// row for every YAML field of config.Config (every yaml tag path, nested;
// a map's key written as <name>) and every flag tokenringd defines, and no
// row for a field or flag that does not exist. A row's default must hold
// the real default (config.Default() for fields outside maps; the flag
// set's for flags) when that default is not the zero value, and a flag's
// row must name its TOKENRING_<NAME> variable.
func TestReferenceListsEveryConfigFieldAndFlag(t *testing.T) {
	doc, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	fieldRows, flagRows := referenceRows(string(doc))

	fields := configFields()
	defaults := reflect.ValueOf(config.Default())
	for _, f := range fields {
		row, ok := fieldRows[f.path]
		if !ok {
			t.Errorf("%s has no row for the config field `%s`: add | `%s` | type | default | meaning |", referenceDoc, f.path, f.path)
			continue
		}
		if f.index == nil {
			continue // under a map: no default of its own
		}
		if want := defaultText(defaults.FieldByIndex(f.index)); want != "" && !strings.Contains(row.cells[2], want) {
			t.Errorf("%s: `%s`'s default is %s, the row says %q", referenceDoc, f.path, want, row.cells[2])
		}
	}
	for path := range fieldRows {
		if !slices.ContainsFunc(fields, func(f configField) bool { return f.path == path }) {
			t.Errorf("%s has a row for `%s`, which is no config field", referenceDoc, path)
		}
	}

	flags := tokenringdFlags(t)
	for _, f := range flags {
		row, ok := flagRows[f.name]
		if !ok {
			t.Errorf("%s has no row for the flag `-%s`: add | `-%s ...` | `%s` | default | meaning |", referenceDoc, f.name, f.name, f.env())
			continue
		}
		if !strings.Contains(row.cells[1], f.env()) {
			t.Errorf("%s: the row of -%s does not name its variable %s: %q", referenceDoc, f.name, f.env(), row.cells[1])
		}
		if f.def != "" && !strings.Contains(row.cells[2], f.def) {
			t.Errorf("%s: -%s's default is %s, the row says %q", referenceDoc, f.name, f.def, row.cells[2])
		}
	}
	for name := range flagRows {
		if !slices.ContainsFunc(flags, func(f flagRef) bool { return f.name == name }) {
			t.Errorf("%s has a row for -%s, which tokenringd does not define", referenceDoc, name)
		}
	}
	if len(fields) < 50 || len(flags) < 10 {
		t.Errorf("found only %d config fields and %d flags: is the walk broken?", len(fields), len(flags))
	}
}

// docRow is one row of a markdown table: its cells, trimmed.
type docRow struct{ cells []string }

var (
	placeholder = regexp.MustCompile(`<[^>]*>`)
	flagCell    = regexp.MustCompile("^`-([A-Za-z0-9][\\w.-]*)[ `]")
	fieldCell   = regexp.MustCompile("^`([a-z_][^`]*)`$")
)

// referenceRows returns the rows of the doc's field tables (headed
// "| field |") by path, placeholders written <>, and of its flag tables
// (headed "| flag |") by flag name.
func referenceRows(doc string) (fields, flags map[string]docRow) {
	fields, flags = map[string]docRow{}, map[string]docRow{}
	table := ""
	for line := range strings.Lines(doc) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			table = ""
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case table == "" && len(cells) > 0:
			table = cells[0] // the header
		case len(cells) < 3 || strings.HasPrefix(cells[0], "---"):
		case table == "field":
			if m := fieldCell.FindStringSubmatch(cells[0]); m != nil {
				fields[placeholder.ReplaceAllString(m[1], "<>")] = docRow{cells}
			}
		case table == "flag":
			if m := flagCell.FindStringSubmatch(cells[0] + " "); m != nil {
				flags[m[1]] = docRow{cells}
			}
		}
	}
	return fields, flags
}

// configField is one YAML leaf of config.Config: its path ("replication.copies",
// "pools.<>.rpm") and, outside maps, its index for reflect.Value.FieldByIndex.
type configField struct {
	path  string
	index []int
}

// configFields walks config.Config's yaml tags. Fields tagged "-" are
// decoded by hand from the entries of another field; handDecoded lists
// what their YAML holds.
func configFields() []configField {
	var out []configField
	walkYAML(reflect.TypeFor[config.Config](), "", []int{}, &out)
	for _, p := range handDecoded {
		out = append(out, configField{path: p})
	}
	return out
}

// handDecoded are the YAML paths of Config's "-" fields: a tenant entry's
// parent and models (LimitsSection.TenantChains, the same shape as a
// group's), and an API key written as a mapping (Config.KeyAccounts: its
// tenant beside KeyAccount's own fields).
var handDecoded = func() []string {
	p := []string{"limits.tenants.<>.parent", "keys.<>.tenant"}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[config.Limits]()) {
		p = append(p, "limits.tenants.<>.models.<>."+yamlName(f))
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[config.KeyAccount]()) {
		p = append(p, "keys.<>."+yamlName(f))
	}
	return p
}()

var durationType = reflect.TypeFor[time.Duration]()

// walkYAML appends the leaves of struct type t at path. index is the
// field index from the root, nil once under a map.
func walkYAML(t reflect.Type, path string, index []int, out *[]configField) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if !f.IsExported() || tag == "-" {
			continue
		}
		var idx []int
		if index != nil {
			idx = append(slices.Clip(index), i)
		}
		if strings.Contains(tag, ",inline") {
			walkYAML(f.Type, path, idx, out)
			continue
		}
		walkValue(f.Type, joinPath(path, yamlName(f)), idx, out)
	}
}

// walkValue appends the leaves of a value of type t at path.
func walkValue(t reflect.Type, path string, index []int, out *[]configField) {
	switch {
	case t.Kind() == reflect.Struct && t != durationType:
		walkYAML(t, path, index, out)
	case t.Kind() == reflect.Map:
		walkValue(t.Elem(), path+".<>", nil, out)
	default:
		*out = append(*out, configField{path: path, index: index})
	}
}

// yamlName is f's YAML key: its tag's name, else its name in lower case
// (yaml.v3's rule).
func yamlName(f reflect.StructField) string {
	if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" {
		return name
	}
	return strings.ToLower(f.Name)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// defaultText is v as the doc writes a default ("15ms", "60s", "4096"),
// "" for a zero value (whose row may say "none", "empty" or "0").
func defaultText(v reflect.Value) string {
	if v.IsZero() {
		return ""
	}
	if v.Type() == durationType {
		d := time.Duration(v.Int())
		switch {
		case d%time.Second == 0:
			return strconv.FormatInt(int64(d/time.Second), 10) + "s"
		case d%time.Millisecond == 0:
			return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
		}
		return d.String()
	}
	return fmt.Sprint(v.Interface())
}

// flagRef is one tokenringd flag and its default as -h prints it ("" for
// a zero value, or one the usage describes in words).
type flagRef struct{ name, def string }

func (f flagRef) env() string {
	return "TOKENRING_" + strings.ToUpper(strings.ReplaceAll(f.name, "-", "_"))
}

var (
	usageHead    = regexp.MustCompile(`^  -([A-Za-z0-9][\w.-]*)(?: \S+)?$`)
	usageDefault = regexp.MustCompile(`\(default ("(?:[^"\\]|\\.)*"|\S+)\)$`)
)

// tokenringdFlags are the flags of the real flag set: parseFlags (what
// main and run call) asked for -h, its usage read back.
func tokenringdFlags(t *testing.T) []flagRef {
	t.Helper()
	var usage bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, func(string) string { return "" }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseFlags -h: %v, want flag.ErrHelp", err)
	}
	var out []flagRef
	for line := range strings.Lines(usage.String()) {
		line = strings.TrimRight(line, "\n")
		if m := usageHead.FindStringSubmatch(line); m != nil {
			out = append(out, flagRef{name: m[1]})
			continue
		}
		if m := usageDefault.FindStringSubmatch(line); m != nil && len(out) > 0 {
			def := m[1]
			if s, err := strconv.Unquote(def); err == nil {
				def = s
			}
			out[len(out)-1].def = def
		}
	}
	return out
}
