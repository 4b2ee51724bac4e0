package jsonwire

// Decoders by table. A Decoder[T] reads a JSON object into a T from a list
// of fields, one per key it knows, each a name and the kind of its value
// (String, Bool, Int, IntPointer, Raw, Object, Pointer, Slice, or Func for
// a reader of one's own). It reads exactly what encoding/json reads into
// a T, to the same values, within this subset: keys in Raw's subset
// (printable ASCII without escapes), decoded strings in it too, integers
// as Int reads them, each field's key at most once; values kept raw or
// skipped may be any JSON (Any) nested up to MaxDepth. For anything else
// it reports false, and the caller hands the whole text to encoding/json
// (FuzzDecoder checks both halves: whatever a Decoder takes,
// encoding/json takes to the same value). The semantics it shares with
// encoding/json:
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

import "encoding/json"

// MaxDepth bounds the nesting of a value a Decoder skips or keeps raw:
// deeper text is encoding/json's.
const MaxDepth = 32

// maxFields bounds a Decoder's fields: a bit each in Read's record of the
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

// Field is one key of a Decoder's objects: its name and the reader of its
// value into a T. Make one with String, Bool, Int, IntPointer, Raw,
// Object, Pointer, Slice, Func or Embed.
type Field[T any] struct {
	name string
	// read reads the value into v. prev, when not nil, is the T read just
	// before v (the previous element of a slice): a string equal to
	// prev's is prev's, not a copy.
	read func(s *Scanner, v, prev *T) bool
	addr func(v *T) any                     // the Go field read into, for Check; nil for Func
	sub  interface{ check([]string) error } // the Decoder of the value, for Check; nil for a scalar
}

// Decoder reads objects into a T by its table of fields. Make one with
// NewDecoder, once (a package variable): it is read-only after, and safe
// for concurrent use.
type Decoder[T any] struct {
	fields  []Field[T]
	unknown Unknown
}

// NewDecoder returns the Decoder of fields. It panics on a table that
// cannot be read as encoding/json reads: more than 64 fields, a name out
// of Raw's subset, or two names equal but for case.
func NewDecoder[T any](unknown Unknown, fields ...Field[T]) *Decoder[T] {
	if len(fields) > maxFields {
		panic("jsonwire: more than 64 fields")
	}
	for i, f := range fields {
		if f.name == "" || PlainLen([]byte(f.name)) != len(f.name) {
			panic("jsonwire: field name " + f.name + " is not plain ASCII")
		}
		for _, g := range fields[:i] {
			if foldEqual([]byte(f.name), g.name) {
				panic("jsonwire: fields " + g.name + " and " + f.name + " are one to encoding/json")
			}
		}
	}
	return &Decoder[T]{fields: fields, unknown: unknown}
}

// Decode reads b, one object and white space, into v (zero) and reports
// whether it could. Like every reader here, false leaves v undefined.
func (d *Decoder[T]) Decode(b []byte, v *T) bool {
	s := New(b)
	return s.Peek() == '{' && d.Read(&s, v, nil) && s.End()
}

// Read reads one object (not null) from s into v. prev, if not nil, is
// a T read before: v's strings equal to prev's are shared, not copied.
func (d *Decoder[T]) Read(s *Scanner, v, prev *T) bool {
	var seen uint64
	next := 0 // keys mostly come in the table's order: look there first
	return s.Members(func(key []byte) bool {
		i := d.lookup(key, next)
		if i < 0 {
			if d.unknown == RefuseUnknown {
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
		return d.fields[i].read(s, v, prev)
	})
}

// lookup returns the index of the field key names, from from on (and
// around), or -1.
func (d *Decoder[T]) lookup(key []byte, from int) int {
	n := len(d.fields)
	for j := range n {
		i := from + j
		if i >= n {
			i -= n
		}
		if foldEqual(key, d.fields[i].name) {
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

// at returns field(v), or nil for a nil v.
func at[T, F any](v *T, field func(*T) *F) *F {
	if v == nil {
		return nil
	}
	return field(v)
}

// String is a string field: a string of Raw's subset, copied (or prev's
// when equal), or null.
func String[T any](name string, field func(*T) *string) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), read: func(s *Scanner, v, prev *T) bool {
		if s.Peek() == 'n' {
			return s.Null()
		}
		b, ok := s.Raw()
		if !ok {
			return false
		}
		if p := at(prev, field); p != nil && *p == string(b) {
			*field(v) = *p
		} else {
			*field(v) = string(b)
		}
		return true
	}}
}

// Bool is a bool field: true, false or null.
func Bool[T any](name string, field func(*T) *bool) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), read: func(s *Scanner, v, _ *T) bool {
		if s.Peek() == 'n' {
			return s.Null()
		}
		x, ok := s.Bool()
		*field(v) = x
		return ok
	}}
}

// Int is an integer field (an int or an int64): an integer as Int reads
// it, or null.
func Int[T any, I ~int | ~int64](name string, field func(*T) *I) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), read: func(s *Scanner, v, _ *T) bool {
		if s.Peek() == 'n' {
			return s.Null()
		}
		x, ok := s.Int()
		*field(v) = I(x)
		return ok
	}}
}

// IntPointer is a *int64 field: an integer, in a new int64, or null,
// which sets it nil.
func IntPointer[T any](name string, field func(*T) **int64) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), read: func(s *Scanner, v, _ *T) bool {
		if s.Peek() == 'n' {
			*field(v) = nil
			return s.Null()
		}
		x, ok := s.Int()
		*field(v) = &x
		return ok
	}}
}

// Raw is a json.RawMessage field: any value (null included) as its bytes,
// in place: the field is a slice of the text read, not a copy.
func Raw[T any](name string, field func(*T) *json.RawMessage) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), read: func(s *Scanner, v, _ *T) bool {
		b, ok := s.Any(MaxDepth)
		*field(v) = b
		return ok
	}}
}

// Object is a nested struct field, read by d: an object (merged into the
// field, zero when read) or null.
func Object[T, U any](name string, field func(*T) *U, d *Decoder[U]) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), sub: d, read: func(s *Scanner, v, prev *T) bool {
		return s.Null() || d.Read(s, field(v), at(prev, field))
	}}
}

// Pointer is a *struct field, read by d: an object, into a new U, or
// null, which sets it nil.
func Pointer[T, U any](name string, field func(*T) **U, d *Decoder[U]) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), sub: d, read: func(s *Scanner, v, prev *T) bool {
		if s.Null() {
			*field(v) = nil
			return true
		}
		var p *U
		if q := at(prev, field); q != nil {
			p = *q
		}
		u := new(U)
		*field(v) = u
		return d.Read(s, u, p)
	}}
}

// Slice is a []struct field, read by d: an array of objects (each element
// read with the one before it as prev; a null element is the zero U)
// appended to the field (nil or empty), which [] leaves empty but not
// nil, or null, which sets it nil.
func Slice[T, U any](name string, field func(*T) *[]U, d *Decoder[U]) Field[T] {
	return Field[T]{name: name, addr: addrOf(field), sub: d, read: func(s *Scanner, v, _ *T) bool {
		xs := field(v)
		if s.Null() {
			*xs = nil
			return true
		}
		if *xs == nil {
			*xs = []U{}
		}
		return s.Array(func() bool {
			*xs = append(*xs, *new(U))
			n := len(*xs)
			var prev *U
			if n > 1 {
				prev = &(*xs)[n-2]
			}
			return s.Null() || d.Read(s, &(*xs)[n-1], prev)
		})
	}}
}

// Func is a field read by read, which must read exactly what encoding/json
// would read into the field named, or report false: for a value that none
// of the kinds above reads. Check sees only its name.
func Func[T any](name string, read func(s *Scanner, v, prev *T) bool) Field[T] {
	return Field[T]{name: name, read: read}
}

// Embed is the fields of d lifted to a T that embeds a U (field returns
// it): as encoding/json reads an embedded struct's fields as the outer
// struct's own. d's Unknown is not used: the outer Decoder's is.
func Embed[T, U any](field func(*T) *U, d *Decoder[U]) []Field[T] {
	out := make([]Field[T], len(d.fields))
	for i, f := range d.fields {
		out[i] = Field[T]{name: f.name, sub: f.sub, read: func(s *Scanner, v, prev *T) bool {
			return f.read(s, field(v), at(prev, field))
		}}
		if f.addr != nil {
			out[i].addr = func(v *T) any { return f.addr(field(v)) }
		}
	}
	return out
}

// addrOf is field as Check calls it.
func addrOf[T, F any](field func(*T) *F) func(*T) any {
	return func(v *T) any { return field(v) }
}
