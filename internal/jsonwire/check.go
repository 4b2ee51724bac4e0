package jsonwire

// Checking a Decoder's table against its struct, by reflection: for the
// tests of the packages that declare tables (decoding itself reflects on
// nothing).

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Check reports whether d's table is T's as encoding/json sees it: each
// field's name is the JSON name (json tag, else Go name) of the struct
// field it writes, through embedded structs as encoding/json flattens
// them; a Decoder that skips unknown keys has every field of T (one that
// refuses them may leave some out, named in leftOut); and so on down, for
// the Decoders of nested objects (leftOut holds for them too).
func (d *Decoder[T]) Check(leftOut ...string) error {
	return d.t.check(leftOut)
}

func (t *table) check(leftOut []string) error {
	if t.typ.Kind() != reflect.Struct {
		return fmt.Errorf("jsonwire: a Decoder of %s, not a struct", t.typ)
	}
	v := reflect.New(t.typ)
	goFields := map[string]reflect.Value{} // by JSON name, each one's address
	jsonFields(v.Elem(), goFields)
	var names []string
	for _, f := range t.fields {
		names = append(names, f.name)
		g, ok := goFields[f.name]
		if !ok {
			return fmt.Errorf("jsonwire: %s has no field %q", t.typ, f.name)
		}
		if g.Pointer() != v.Pointer()+f.off || g.Type().Elem() != f.typ {
			return fmt.Errorf("jsonwire: %s: the field read as %q is not the one named so", t.typ, f.name)
		}
		if f.sub != nil {
			if err := f.sub.check(leftOut); err != nil {
				return fmt.Errorf("%s.%s: %w", t.typ, f.name, err)
			}
		}
	}
	for name := range goFields {
		switch {
		case slices.Contains(names, name):
		case t.unknown == RefuseUnknown && slices.Contains(leftOut, name):
		default:
			return fmt.Errorf("jsonwire: %s's field %q is not in the table", t.typ, name)
		}
	}
	return nil
}

// jsonFields adds the exported fields of the struct v (addressable) to
// out by JSON name, each as its address, the fields of an untagged
// embedded struct as v's own.
func jsonFields(v reflect.Value, out map[string]reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
			jsonFields(v.Field(i), out)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out[name] = v.Field(i).Addr()
	}
}
