package jsonwire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// The test's structs use every kind of field, nested and embedded, read by
// a Decoder that skips unknown keys and by one that refuses them.

type inner struct {
	A int64  `json:"a"`
	S string `json:"s"`
	B bool   `json:"b"`
}

type embedded struct {
	E  string `json:"e"`
	EP *int64 `json:"ep"`
}

type every struct {
	embedded
	Str    string          `json:"str"`
	Flag   bool            `json:"flag"`
	I64    int64           `json:"i64"`
	N      int             `json:"n"`
	Ptr    *int64          `json:"ptr"`
	Raw    json.RawMessage `json:"raw"`
	Obj    inner           `json:"obj"`
	ObjPtr *inner          `json:"Obj_Ptr"`
	List   []inner         `json:"list"`
	HasObj bool            `json:"-"`                        // "obj" was read (Present)
	Long   int64           `json:"a_rather_long_Field_name"` // over 16 bytes: compared byte by byte
	Eight  int64           `json:"eight_08"`                 // 8 bytes: one word
}

// strict is every beside a field the refusing Decoder leaves out, for
// encoding/json to read.
type strict struct {
	every
	Other []float64 `json:"other"`
}

// fieldsOf is the table of every with inner's decoder in.
func fieldsOf(in *Decoder[inner]) []Field[every] {
	emb := NewDecoder(SkipUnknown,
		String("e", func(v *embedded) *string { return &v.E }),
		IntPointer("ep", func(v *embedded) **int64 { return &v.EP }),
	)
	return append(Embed(func(v *every) *embedded { return &v.embedded }, emb),
		String("str", func(v *every) *string { return &v.Str }),
		Bool("flag", func(v *every) *bool { return &v.Flag }),
		Int("i64", func(v *every) *int64 { return &v.I64 }),
		Int("n", func(v *every) *int { return &v.N }),
		IntPointer("ptr", func(v *every) **int64 { return &v.Ptr }),
		Raw("raw", func(v *every) *json.RawMessage { return &v.Raw }),
		Present(Object("obj", func(v *every) *inner { return &v.Obj }, in), func(v *every) *bool { return &v.HasObj }),
		Pointer("Obj_Ptr", func(v *every) **inner { return &v.ObjPtr }, in),
		Slice("list", func(v *every) *[]inner { return &v.List }, in),
		Int("a_rather_long_Field_name", func(v *every) *int64 { return &v.Long }),
		Int("eight_08", func(v *every) *int64 { return &v.Eight }),
	)
}

func innerDecoder(u Unknown) *Decoder[inner] {
	return NewDecoder(u,
		Int("a", func(v *inner) *int64 { return &v.A }),
		String("s", func(v *inner) *string { return &v.S }),
		Bool("b", func(v *inner) *bool { return &v.B }),
	)
}

var (
	skipping = NewDecoder(SkipUnknown, fieldsOf(innerDecoder(SkipUnknown))...)
	refusing = NewDecoder(RefuseUnknown, Embed(func(v *strict) *every { return &v.every },
		NewDecoder(RefuseUnknown, fieldsOf(innerDecoder(RefuseUnknown))...))...)
)

// Tables made by hand agree with their structs; Check finds those that do
// not.
func TestCheck(t *testing.T) {
	if err := skipping.Check(); err != nil {
		t.Error(err)
	}
	if err := refusing.Check("other"); err != nil {
		t.Error(err)
	}
	if err := refusing.Check(); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("a refusing table without other: %v", err)
	}
	for _, d := range []*Decoder[inner]{
		NewDecoder(SkipUnknown, Int("a", func(v *inner) *int64 { return &v.A }), String("s", func(v *inner) *string { return &v.S })),
		NewDecoder(SkipUnknown, Int("a", func(v *inner) *int64 { return &v.A }), String("b", func(v *inner) *string { return &v.S }),
			Bool("s", func(v *inner) *bool { return &v.B })),
		NewDecoder(SkipUnknown, Int("a", func(v *inner) *int64 { return &v.A }), String("s", func(v *inner) *string { return &v.S }),
			Bool("c", func(v *inner) *bool { return &v.B })),
	} {
		if err := d.Check(); err == nil {
			t.Errorf("%v: no error", d.t.fields)
		}
	}
}

// checkDecoder fails t if either Decoder takes b and encoding/json does
// not, or decodes it to another value: the skipping one against
// json.Unmarshal, the refusing one against a json.Decoder that disallows
// unknown fields (and, as Decode, trailing data).
func checkDecoder(t *testing.T, b []byte) {
	var got every
	if skipping.Decode(b, &got) {
		var want every
		err := json.Unmarshal(b, &want)
		want.HasObj = hasObj(b)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\ngot           %+v\nencoding/json %+v (%v)", b, got, want, err)
		}
	}
	var gotStrict strict
	if refusing.Decode(b, &gotStrict) {
		var want strict
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err := dec.Decode(&want)
		want.HasObj = hasObj(b)
		if err != nil || !json.Valid(b) || !reflect.DeepEqual(gotStrict, want) {
			t.Fatalf("strict %q:\ngot           %+v\nencoding/json %+v (%v)", b, gotStrict, want, err)
		}
	}
}

// hasObj reports whether the object b has the key "obj", as
// encoding/json tells: a json.RawMessage is nil without it.
func hasObj(b []byte) bool {
	var v struct {
		Obj json.RawMessage `json:"obj"`
	}
	return json.Unmarshal(b, &v) == nil && v.Obj != nil
}

// taken are texts both Decoders read.
var taken = []string{
	`{}`, ` { } `,
	`{"e":"x","ep":-7,"str":"hello world","flag":true,"i64":-0,"n":123456789012345678,"ptr":5,"raw":{"a":[1,2.5e-3,"\u00e9",null]},` +
		`"obj":{"a":1,"s":"t","b":false},"Obj_Ptr":{"s":"u"},"list":[{"a":1},null,{"s":"v","b":true},{}]}`,
	`{"STR":"x","Flag":false,"I64":1,"obj_ptr":{"A":2},"LIST":[],"RAW":"a\"b","OBJ":{}}`,
	`{"str":null,"flag":null,"i64":null,"n":null,"ptr":null,"raw":null,"obj":null,"Obj_Ptr":null,"list":null,"ep":null}`,
	`{"raw":[[[[]]]],"obj":{},"list":[null]}`,
	`{"A_RATHER_LONG_FIELD_NAME":1,"Eight_08":2}`, `{"eight_08":2,"a_rather_long_field_name":1}`,
	`{"n":1}`, `{"eIGHT_08":1}`, `{"n":2,"e":"x"}`, // keys near the end: compared byte by byte
}

// left are texts neither Decoder reads: outside the subset, invalid, or
// of the wrong types.
var left = []string{
	`{"str":"a\nb"}`, `{"str":"é"}`, "{\"str\":\"\x7f\"}", `{"st\u0072":"a"}`, `{"str":"a","STR":"b"}`, `{"obj":{"a":1},"obj":{"s":"x"}}`,
	`{"i64":1.0}`, `{"i64":1e2}`, `{"i64":012}`, `{"i64":1234567890123456789}`, `{"i64":"1"}`, `{"flag":1}`, `{"str":1}`,
	`{"obj":[]}`, `{"list":{}}`, `{"list":[1]}`, `{"Obj_Ptr":true}`, `{"raw":tru}`, `{"raw":"\x"}`, `{"raw":01}`,
	`{"str":"a"} {}`, `{"str":"a",}`, `{"str" "a"}`, `null`, `[]`, ``, `{`,
	`{"raw":` + strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1) + `}`,
	"{\"eight\x7f08\":1}", // DEL | 0x20 is _ | 0x20, but DEL is out of Raw's subset
}

// nearMisses are keys that name no field, but nearly: skipped, or refused.
var nearMisses = []string{
	`{"a_rather_long_field_nam":1}`, `{"a_rather_long_field_namex":1}`, `{"a_rather_long_field_nane":1}`, `{"eight_8":1}`,
	`{"eight_08 ":1}`, `{"eight_0":1}`, `{"eight_0h":1}`, `{"Str_":1}`, `{"st":1}`, `{"sTs":1}`, `{"eight_08?":1}`,
	`{"eight_08":1,"list":[{"a":1},{"a":2}],"Lisu":"a_rather_long_field_nane"}`,
}

func TestDecoderTakesItsSubset(t *testing.T) {
	for _, b := range taken {
		var v every
		var w strict
		if !skipping.Decode([]byte(b), &v) || !refusing.Decode([]byte(b), &w) {
			t.Errorf("%s: not taken", b)
		}
		checkDecoder(t, []byte(b))
	}
	for _, b := range left {
		var v every
		var w strict
		if skipping.Decode([]byte(b), &v) || refusing.Decode([]byte(b), &w) {
			t.Errorf("%s: taken", b)
		}
	}
	for _, b := range nearMisses {
		var v every
		want := every{}
		if strings.Contains(b, "list") {
			want = every{Eight: 1, List: []inner{{A: 1}, {A: 2}}}
		}
		if !skipping.Decode([]byte(b), &v) || !reflect.DeepEqual(v, want) || refusing.Decode([]byte(b), &strict{}) {
			t.Errorf("%s: skipping reads %+v, or refusing takes it", b, v)
		}
		checkDecoder(t, []byte(b))
	}
	// Unknown keys: skipped, any JSON; or refused.
	unknown := []byte(`{"str":"a","zzz":{"x":[1.5,"\u00e9",null,true]},"zzz":0,"other":[1.5]}`)
	var v every
	if !skipping.Decode(unknown, &v) || refusing.Decode(unknown, &strict{}) {
		t.Errorf("%s: skipping %v, refusing takes it too", unknown, v)
	}
	checkDecoder(t, unknown)
}

// Names that | 0x20 would confuse with other keys, or that encoding/json
// takes for one another, are refused.
func TestNewDecoderRefusesNames(t *testing.T) {
	for _, names := range [][]string{{"a@b"}, {"a[b"}, {"x`"}, {"{"}, {"~"}, {"^"}, {"a|b"}, {"a]"}, {""}, {"é"}, {"a\\b"},
		{"ab", "AB"}, {"a_b", "A_b"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q: no panic", names)
				}
			}()
			var fields []Field[inner]
			for _, n := range names {
				fields = append(fields, String(n, func(v *inner) *string { return &v.S }))
			}
			NewDecoder(SkipUnknown, fields...)
		}()
	}
}

// A slice's elements share the strings equal to the element's before them.
func TestSliceSharesStrings(t *testing.T) {
	var v every
	if !skipping.Decode([]byte(`{"list":[{"s":"same"},{"s":"same"},{"s":"other"}]}`), &v) {
		t.Fatal("not taken")
	}
	if unsafe.StringData(v.List[0].S) != unsafe.StringData(v.List[1].S) || v.List[2].S != "other" {
		t.Fatalf("not shared: %+v", v.List)
	}
}

// FuzzDecoder: whatever a Decoder takes, encoding/json takes too, and
// decodes to the same value; for the Decoder that skips unknown keys as
// json.Unmarshal, for the one that refuses them as a json.Decoder with
// DisallowUnknownFields. It covers every kind of field, and so the
// decoders built of them (api, proxy, client).
func FuzzDecoder(f *testing.F) {
	for _, b := range append(append(taken, left...), nearMisses...) {
		f.Add([]byte(b))
	}
	f.Fuzz(checkDecoder)
}
