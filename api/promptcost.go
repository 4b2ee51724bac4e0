package api

// What a prompt costs before it is admitted (router/promptcost.go): a
// prompt or messages are counted only once the caller may act for the
// tenant, the prompt is within Config.MaxPromptBytes and the tenant is not
// known to be out of requests (router.Router.RefuseExhausted).

import (
	"fmt"

	"github.com/tokenring/tokenring/router"
)

// promptBytes is the size of what countAcquirePrompt would count for in.
func promptBytes(in *acquireRequest) int {
	if in.Prompt != nil {
		return len(*in.Prompt)
	}
	return router.MessagesBytes(in.Messages)
}

// promptCapMessage is the 413's error for a prompt of n bytes.
func (s *Server) promptCapMessage(n int) string {
	return fmt.Sprintf("prompt of %d bytes is over this node's cap of %d bytes counted (limits.max_prompt_bytes): count it yourself and send prompt_tokens",
		n, s.cfg.MaxPromptBytes)
}

// countAcquirePrompt counts in's prompt or messages (parseAcquire checked
// that there is a Counter and that messages are not empty).
func (s *Server) countAcquirePrompt(in *acquireRequest) int64 {
	if in.Prompt != nil {
		return int64(s.cfg.Counter.Text(in.Model, *in.Prompt))
	}
	return int64(s.cfg.Counter.Messages(in.Model, in.Messages))
}
