package jsonwire

// The kinds of field: their constructors, and the reading of each into its
// place (a pointer to the field; prev the same field of the struct read
// before, or nil).

import (
	"encoding/json"
	"reflect"
	"unsafe"
)

// String is a string field: a string of Raw's subset, copied (or prev's
// when equal), or null.
func String[T any](name string, field func(*T) *string) Field[T] {
	return newField(name, kString, field)
}

// Bool is a bool field: true, false or null.
func Bool[T any](name string, field func(*T) *bool) Field[T] {
	return newField(name, kBool, field)
}

// Int is an integer field (an int or an int64): an integer as Int reads
// it, or null.
func Int[T any, I ~int | ~int64](name string, field func(*T) *I) Field[T] {
	var x I
	if reflect.TypeOf(x).Kind() == reflect.Int {
		return newField(name, kInt, field)
	}
	return newField(name, kInt64, field)
}

// IntPointer is a *int64 field: an integer, in a new int64, or null,
// which sets it nil.
func IntPointer[T any](name string, field func(*T) **int64) Field[T] {
	return newField(name, kIntPointer, field)
}

// Raw is a json.RawMessage field: any value (null included) as its bytes,
// in place: the field is a slice of the text read, not a copy.
func Raw[T any](name string, field func(*T) *json.RawMessage) Field[T] {
	return newField(name, kRaw, field)
}

// Object is a nested struct field, read by d: an object (merged into the
// field, zero when read) or null.
func Object[T, U any](name string, field func(*T) *U, d *Decoder[U]) Field[T] {
	f := newField(name, kObject, field)
	f.f.sub = &d.t
	return f
}

// Pointer is a *struct field, read by d: an object, into a new U, or
// null, which sets it nil.
func Pointer[T, U any](name string, field func(*T) **U, d *Decoder[U]) Field[T] {
	f := newField(name, kPointer, field)
	f.f.sub = &d.t
	f.f.alloc = func() unsafe.Pointer { return unsafe.Pointer(new(U)) }
	return f
}

// Slice is a []struct field, read by d: an array of objects (each element
// read with the one before it as prev; a null element is the zero U)
// appended to the field (nil or empty), which [] leaves empty but not
// nil, or null, which sets it nil.
func Slice[T, U any](name string, field func(*T) *[]U, d *Decoder[U]) Field[T] {
	f := newField(name, kSlice, field)
	f.f.sub = &d.t
	f.f.size = unsafe.Sizeof(*new(U))
	f.f.empty = unsafe.Pointer(unsafe.SliceData([]U{}))
	f.f.grow = func(h sliceHeader) sliceHeader {
		xs := append(unsafe.Slice((*U)(h.data), h.cap)[:h.len], *new(U))
		return sliceHeader{unsafe.Pointer(unsafe.SliceData(xs)), len(xs), cap(xs)}
	}
	return f
}

// Present is f, which also sets *flag(v) when its key is read (its value
// null included): where encoding/json would tell a missing key from any
// value (a json.RawMessage left nil).
func Present[T any](f Field[T], flag func(*T) *bool) Field[T] {
	f.f.present = 1 + offset(flag)
	return f
}

// Embed is the fields of d lifted to a T that embeds a U (field returns
// it): as encoding/json reads an embedded struct's fields as the outer
// struct's own. d's Unknown is not used: the outer Decoder's is.
func Embed[T, U any](field func(*T) *U, d *Decoder[U]) []Field[T] {
	off := offset(field)
	out := make([]Field[T], len(d.t.fields))
	for i, f := range d.t.fields {
		f.off += off
		if f.present != 0 {
			f.present += off
		}
		out[i] = Field[T]{f}
	}
	return out
}

func newField[T, F any](name string, k kind, at func(*T) *F) Field[T] {
	return Field[T]{field{name: name, kind: k, off: offset(at), typ: reflect.TypeFor[F]()}}
}

// offset is the offset in a T of the F that field returns. It panics if
// that is not inside the T (a field behind a pointer, say).
func offset[T, F any](field func(*T) *F) uintptr {
	v := new(T)
	p, f := uintptr(unsafe.Pointer(v)), uintptr(unsafe.Pointer(field(v)))
	if f < p || f-p+unsafe.Sizeof(*new(F)) > unsafe.Sizeof(*v) {
		panic("jsonwire: a field outside its struct")
	}
	return f - p
}

// read reads f's value into the field at v.
func (f *field) read(s *Scanner, v, prev unsafe.Pointer) bool {
	switch f.kind {
	case kString:
		mark := s.i
		b, ok := s.Raw()
		switch {
		case !ok: // null, which leaves the string, or not a string
			s.i = mark
			return s.Null()
		case prev != nil && *(*string)(prev) == string(b):
			*(*string)(v) = *(*string)(prev)
		default:
			*(*string)(v) = string(b)
		}
		return true
	case kBool:
		if s.Peek() == 'n' {
			return s.Null()
		}
		x, ok := s.Bool()
		*(*bool)(v) = x
		return ok
	case kInt64:
		mark := s.i
		x, ok := s.Int()
		if !ok { // null, which leaves it, or not an integer
			s.i = mark
			return s.Null()
		}
		*(*int64)(v) = x
		return true
	case kInt, kIntPointer:
		return f.readInt(s, v)
	case kRaw:
		b, ok := s.Any(MaxDepth)
		*(*json.RawMessage)(v) = b
		return ok
	case kObject:
		return s.Null() || f.sub.read(s, v, prev)
	case kPointer:
		if s.Null() {
			*(*unsafe.Pointer)(v) = nil
			return true
		}
		u := f.alloc()
		*(*unsafe.Pointer)(v) = u
		if prev != nil {
			prev = *(*unsafe.Pointer)(prev)
		}
		return f.sub.read(s, u, prev)
	}
	return f.readSlice(s, (*sliceHeader)(v))
}

// readInt reads an integer, or null, into an int or a *int64 (an int64 is
// read, more often, by read itself).
func (f *field) readInt(s *Scanner, v unsafe.Pointer) bool {
	mark := s.i
	x, ok := s.Int()
	if !ok { // null, which leaves an integer and sets a pointer nil, or not an integer
		s.i = mark
		if f.kind == kIntPointer {
			*(**int64)(v) = nil
		}
		return s.Null()
	}
	switch f.kind {
	case kInt:
		*(*int)(v) = int(x)
	default:
		p := new(int64)
		*p = x
		*(**int64)(v) = p
	}
	return true
}

// readSlice reads an array of objects, or null, into the slice at xs.
func (f *field) readSlice(s *Scanner, xs *sliceHeader) bool {
	if s.Null() {
		*xs = sliceHeader{}
		return true
	}
	if xs.data == nil {
		xs.data = f.empty // an empty slice, not nil
	}
	return s.Array(func() bool {
		*xs = f.grow(*xs)
		elem := unsafe.Add(xs.data, uintptr(xs.len-1)*f.size)
		var prev unsafe.Pointer
		if xs.len > 1 {
			prev = unsafe.Add(elem, -int(f.size))
		}
		return s.Null() || f.sub.read(s, elem, prev)
	})
}
