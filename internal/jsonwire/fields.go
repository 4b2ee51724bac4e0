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
	"bytes"
	"encoding/binary"
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
	folded  string    // name, each byte | 0x20: how lookup compares keys
	words   [2]uint64 // folded's first 16 bytes, by 8, little-endian, zero past its end
	masks   [2]uint64 // the bytes of words that are folded's
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
	lens    uint64 // bit n set if a field's name is n bytes long (n < 64)
	unknown Unknown
	typ     reflect.Type // the struct's, for Check
}

// Decoder reads objects into a T by its table of fields. Make one with
// NewDecoder, once (a package variable): it is read-only after, and safe
// for concurrent use.
type Decoder[T any] struct{ t table }

// NewDecoder returns the Decoder of fields. It panics on a table that
// cannot be read as encoding/json reads, or not compared as lookup
// compares: more than 64 fields, a name out of Raw's subset or with one of
// @[]^`{|}~ (which | 0x20 would take for another byte), or two names
// equal but for case.
func NewDecoder[T any](unknown Unknown, fields ...Field[T]) *Decoder[T] {
	if len(fields) > maxFields {
		panic("jsonwire: more than 64 fields")
	}
	d := &Decoder[T]{t: table{unknown: unknown, typ: reflect.TypeFor[T]()}}
	for _, f := range fields {
		name := []byte(f.f.name)
		if len(name) == 0 || PlainLen(name) != len(name) || bytes.ContainsAny(name, "@[]^`{|}~") {
			panic("jsonwire: field name " + f.f.name + " is not plain ASCII of letters, digits and punctuation")
		}
		for i := range name {
			name[i] |= 0x20
		}
		f.f.folded = string(name)
		var word [16]byte
		copy(word[:], name)
		for w := range f.f.words {
			f.f.words[w] = binary.LittleEndian.Uint64(word[8*w:])
			if n := len(name) - 8*w; n >= 8 {
				f.f.masks[w] = ^uint64(0)
			} else if n > 0 {
				f.f.masks[w] = 1<<(8*n) - 1
			}
		}
		for _, g := range d.t.fields {
			if g.folded == f.f.folded {
				panic("jsonwire: fields " + g.name + " and " + f.f.name + " are one to encoding/json")
			}
		}
		d.t.fields = append(d.t.fields, f.f)
		d.t.lens |= 1 << min(len(name), 63) // 63: any length from 63 on
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
		i := next // the field after the one before, mostly: is, inline
		if i >= len(t.fields) || !t.fields[i].quickly(key) {
			i = -1
			if n := uint(len(key)); t.lens>>min(n, 63)&1 != 0 { // else no field has its length
				i = t.lookup(key, next)
			}
		}
		if i < 0 {
			if t.unknown == RefuseUnknown {
				return false
			}
			_, ok := s.Any(MaxDepth)
			return ok
		}
		bit := uint64(1) << (uint(i) % maxFields)
		if seen&bit != 0 {
			return false // a repeated field: encoding/json merges, we leave it to it
		}
		seen |= bit
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
// around), or -1. A field of another length is passed over without a call.
func (t *table) lookup(key []byte, from int) int {
	fs := t.fields
	for i := from; i < len(fs); i++ {
		if len(fs[i].folded) == len(key) && fs[i].is(key) {
			return i
		}
	}
	for i := range min(from, len(fs)) {
		if len(fs[i].folded) == len(key) && fs[i].is(key) {
			return i
		}
	}
	return -1
}

// is reports whether key (of Raw's subset) names f as encoding/json
// matches a key to a field's name: equal but for the case of letters.
// Comparing each byte | 0x20 is that for the names NewDecoder takes: two
// bytes of Raw's subset that differ but are equal so are a letter in
// either case, or one of the pairs @`, [{, ]} and ^~, which NewDecoder
// refuses in a name (the other pairs, _ and DEL, \ and |, have a byte out
// of Raw's subset, which no key and no name holds). A key of at most 16
// bytes where the text read has 16 from it on (it has, but near its end)
// is compared 8 bytes at a time, those past the key masked out.
func (f *field) is(key []byte) bool {
	if len(key) > 16 || cap(key) < 16 {
		return len(key) == len(f.folded) && f.isSlowly(key)
	}
	return f.quickly(key)
}

// quickly is is for a key of at most 16 bytes with 16 from it on in the
// text: small enough to inline.
func (f *field) quickly(key []byte) bool {
	const fold = 0x2020202020202020
	return len(key) == len(f.folded) && len(key) <= 16 && cap(key) >= 16 &&
		(binary.LittleEndian.Uint64(key[:8])|fold)&f.masks[0] == f.words[0] &&
		(binary.LittleEndian.Uint64(key[8:16])|fold)&f.masks[1] == f.words[1]
}

// isSlowly is is byte by byte, for a key of its length.
//
//go:noinline
func (f *field) isSlowly(key []byte) bool {
	name := f.folded
	for i := 0; i < len(name) && i < len(key); i++ {
		if key[i]|0x20 != name[i] {
			return false
		}
	}
	return true
}
