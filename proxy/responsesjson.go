package proxy

import (
	"encoding/json"

	"github.com/tokenring/tokenring/internal/jsonwire"
)

// The decoder of a Responses stream event (responsesEvent), for the subset
// openaijson.go describes: its type a plain ASCII string, its delta and
// response kept raw (any JSON), every other key skipped. A stream has an
// event a token of the answer; encoding/json reads the rest, and stays
// the reference (TestResponsesDecoderMatches, FuzzDecodeResponsesEvent).
var responsesEventDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
	jsonwire.String("type", func(e *responsesEvent) *string { return &e.Type }),
	jsonwire.Raw("delta", func(e *responsesEvent) *json.RawMessage { return &e.Delta }),
	jsonwire.Raw("response", func(e *responsesEvent) *json.RawMessage { return &e.Response }),
)

// decodeResponsesEvent decodes b into e, a zero responsesEvent, as
// encoding/json would; false leaves b to encoding/json (e is then
// undefined: decode into a fresh one). Raw values are slices of b.
func decodeResponsesEvent(b []byte, e *responsesEvent) bool {
	return responsesEventDecoder.Decode(b, e)
}
