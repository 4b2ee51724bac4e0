package jsonwire

// Decoders by table. A Decoder[T] reads a JSON object into a T from a list
// of fields, one per key it knows, each a name and the kind of its value
// (String, Bool, Int, IntPointer, Raw, Object, Pointer, Slice). It reads
// exactly what encoding/json reads into a T, to the same values, within
// this subset: keys in Raw's subset (printable ASCII without escapes),
// decoded strings in it too, integers as Int reads them, each field's key
// at most once; values kept raw or skipped may be any JSON (Any) nested
// up to MaxDepth. For anything else it reports false, and the caller
// hands the whole text to encoding/json (FuzzDecoder checks both halves:
// whatever a Decoder takes, encoding/json takes to the same value). The
// semantics it shares with encoding/json:
//
//   - a key names a field as encoding/json matches it: equal to the
//     field's name but for the case of ASCII letters;
//   - a key naming no field is skipped (SkipUnknown, as json.Unmarshal
//     does), or refused (RefuseUnknown, as a json.Decoder with
//     DisallowUnknownFields does: such a text is left to encoding/json
//     for its error);
//   - null leaves a string, a bool, an integer or a nested object as it
//     was, sets a pointer or a slice nil, is kept raw as "null", and is
//     the zero element in a slice;
//   - a repeated key of a field, which encoding/json merges (the last
//     value winning, objects merged), is refused instead.
//
// A Decoder decodes into a zero T (a slice may hold a reused, empty
// buffer): what it leaves behind when it reports false is undefined, so a
// caller decodes again into a fresh one. Raw values and nothing else are
// kept in place, slices of the text read.
//
// A field is its offset in the struct, learnt once from the accessor the
// table gives (func(v *T) *F { return &v.X }), which must return a field
// of *v itself (NewDecoder panics otherwise): decoding calls no function
// value with the struct, so a T on the caller's stack stays there (an
// allocation less a call), and reads each value straight into its field.

import (
	"reflect"
	"unsafe"
)

// MaxDepth bounds the nesting of a value a Decoder skips or keeps raw:
// deeper text is encoding/json's.
const MaxDepth = 32

// maxFields bounds a Decoder's fields: a bit each in read's record of the
// keys seen.
const maxFields = 64

// Unknown is what a Decoder does with a key that names none of its fields.
type Unknown uint8

const (
	// SkipUnknown skips its value, as json.Unmarshal does. A Decoder that
	// skips must know every field of its struct (Check): a key for a
	// field it lacks would be skipped where encoding/json reads it.
	SkipUnknown Unknown = iota
	// RefuseUnknown leaves the text to encoding/json, as a json.Decoder
	// with DisallowUnknownFields refuses it. Such a Decoder may leave out
	// fields (a prompt's messages, say) for encoding/json to read; its
	// nested Decoders should refuse too.
	RefuseUnknown
)

// kind is how a field's value is read.
type kind uint8

const (
	kString kind = iota
	kBool
	kInt   // an int
	kInt64 // an int64
	kIntPointer
	kRaw
	kObject
	kPointer
	kSlice
)

// Field is one key of a Decoder's objects: its name, the kind of its value
// and where in a T it goes. Make one with String, Bool, Int, IntPointer,
// Raw, Object, Pointer, Slice or Embed.
type Field[T any] struct{ f field }

// field is a Field without its struct's type.
type field struct {
	name    string
	kind    kind
	off     uintptr                          // the field's offset in its struct
	typ     reflect.Type                     // the field's Go type, for Check
	present uintptr                          // 1 + the offset of a bool set when the key is read; 0 for none
	sub     *table                           // the table of an Object's, a Pointer's or a Slice's struct
	size    uintptr                          // a Slice's element size
	alloc   func() unsafe.Pointer            // a Pointer's new(U)
	grow    func(xs sliceHeader) sliceHeader // a Slice's append of a zero element
	empty   unsafe.Pointer                   // a Slice's []U{}, empty but not nil
}

// sliceHeader is a slice's words, as a Slice field holds them.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// table is a Decoder without its struct's type.
type table struct {
	fields  []field
	unknown Unknown
	typ     reflect.Type // the struct's, for Check
}

// Decoder reads objects into a T by its table of fields. Make one with
// NewDecoder, once (a package variable): it is read-only after, and safe
// for concurrent use.
type Decoder[T any] struct{ t table }

// NewDecoder returns the Decoder of fields. It panics on a table that
// cannot be read as encoding/json reads: more than 64 fields, a name out
// of Raw's subset, or two names equal but for case.
func NewDecoder[T any](unknown Unknown, fields ...Field[T]) *Decoder[T] {
	if len(fields) > maxFields {
		panic("jsonwire: more than 64 fields")
	}
	d := &Decoder[T]{t: table{unknown: unknown, typ: reflect.TypeFor[T]()}}
	for _, f := range fields {
		if f.f.name == "" || PlainLen([]byte(f.f.name)) != len(f.f.name) {
			panic("jsonwire: field name " + f.f.name + " is not plain ASCII")
		}
		for _, g := range d.t.fields {
			if foldEqual([]byte(f.f.name), g.name) {
				panic("jsonwire: fields " + g.name + " and " + f.f.name + " are one to encoding/json")
			}
		}
		d.t.fields = append(d.t.fields, f.f)
	}
	return d
}

// Decode reads b, one object and white space, into v (zero) and reports
// whether it could. Like every reader here, false leaves v undefined.
func (d *Decoder[T]) Decode(b []byte, v *T) bool {
	s := New(b)
	return s.Peek() == '{' && d.t.read(&s, unsafe.Pointer(v), nil) && s.End()
}

// Read reads one object (not null) from s into v. prev, if not nil, is
// a T read before: v's strings equal to prev's are shared, not copied.
func (d *Decoder[T]) Read(s *Scanner, v, prev *T) bool {
	return d.t.read(s, unsafe.Pointer(v), unsafe.Pointer(prev))
}

// read reads an object into the struct at v (prev's, or nil).
func (t *table) read(s *Scanner, v, prev unsafe.Pointer) bool {
	var seen uint64
	next := 0 // keys mostly come in the table's order: look there first
	return s.Members(func(key []byte) bool {
		i := t.lookup(key, next)
		if i < 0 {
			if t.unknown == RefuseUnknown {
				return false
			}
			_, ok := s.Any(MaxDepth)
			return ok
		}
		if seen&(1<<i) != 0 {
			return false // a repeated field: encoding/json merges, we leave it to it
		}
		seen |= 1 << i
		next = i + 1
		f := &t.fields[i]
		if f.present != 0 {
			*(*bool)(unsafe.Add(v, f.present-1)) = true
		}
		var p unsafe.Pointer
		if prev != nil {
			p = unsafe.Add(prev, f.off)
		}
		return f.read(s, unsafe.Add(v, f.off), p)
	})
}

// lookup returns the index of the field key names, from from on (and
// around), or -1.
func (t *table) lookup(key []byte, from int) int {
	n := len(t.fields)
	for j := range n {
		i := from + j
		if i >= n {
			i -= n
		}
		if foldEqual(key, t.fields[i].name) {
			return i
		}
	}
	return -1
}

// foldEqual reports whether key and name, both ASCII, are equal but for
// the case of letters: as encoding/json matches a key to a field's name.
func foldEqual(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	if string(key) == name {
		return true
	}
	for i := range len(key) {
		if lower(key[i]) != lower(name[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
