package proxy

// OpenAI's embeddings (POST /v1/embeddings) as a provider. An embedding
// has no completion: the request reserves its counted input tokens alone
// (proxyCall.noCompletion), and settles with usage.prompt_tokens. The
// input is text (a string or a list of strings, counted with the model's
// encoding) or token ids (a list of ids, or a list of such lists: counted
// by their lengths). The request and the answer are read once a call, by
// encoding/json.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tokenring/tokenring/router"
)

// openAIEmbeddings is the embeddings provider: OpenAI's upstream, key,
// errors and account headers (the embedded openAI), its own path, request
// and usage. Its answers are never streams.
type openAIEmbeddings struct{ openAI }

func (openAIEmbeddings) upstream(cfg Config) (Upstream, string) {
	return cfg.OpenAI, "/embeddings"
}

// embeddingsRequest is what the proxy reads of an embeddings request.
type embeddingsRequest struct {
	Model string          `json:"model"`
	Input json.RawMessage `json:"input"`
}

// errEmbeddingsInput is the 400 of an input of no shape embeddings take.
var errEmbeddingsInput = errors.New("input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")

func (openAIEmbeddings) parse(c *proxyCall, body []byte) error {
	var in embeddingsRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	if err := router.CheckName("model", in.Model, true); err != nil {
		return err
	}
	texts, ids, err := embeddingsInput(in.Input)
	if err != nil {
		return err
	}
	c.model, c.body, c.noCompletion = in.Model, body, true
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	c.setCount(n, func(k router.Counter) int {
		total := ids
		for _, t := range texts {
			total += k.Text(in.Model, t)
		}
		return total
	})
	return nil
}

// embeddingsInput reads an embeddings input, raw valid JSON: the texts to
// count, or the number of token ids given.
func embeddingsInput(raw json.RawMessage) (texts []string, ids int, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, 0, errors.New("input is required")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, 0, errEmbeddingsInput
		}
		return []string{s}, 0, nil
	case '[':
	default:
		return nil, 0, errEmbeddingsInput
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil || len(elems) == 0 {
		return nil, 0, errors.New("input must not be empty")
	}
	// Every element has the first one's kind; encoding/json refuses the
	// others (a string among ids, 1.5 as an id).
	switch first := bytes.TrimSpace(elems[0]); {
	case len(first) > 0 && first[0] == '"':
		if err := json.Unmarshal(raw, &texts); err != nil {
			return nil, 0, errEmbeddingsInput
		}
		return texts, 0, nil
	case len(first) > 0 && first[0] == '[':
		var lists [][]int64
		if err := json.Unmarshal(raw, &lists); err != nil {
			return nil, 0, errEmbeddingsInput
		}
		for _, l := range lists {
			ids += len(l)
		}
		return nil, ids, nil
	default:
		var list []int64
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, 0, errEmbeddingsInput
		}
		return nil, len(list), nil
	}
}

// readAnswer reads the usage of an embeddings answer: its prompt_tokens,
// and no completion.
func (openAIEmbeddings) readAnswer(s *usageSeen, raw []byte) bool {
	var a struct {
		Usage *struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(raw, &a) != nil {
		return false
	}
	if a.Usage != nil {
		s.prompt, s.promptSet = a.Usage.PromptTokens, true
	}
	s.completion, s.final = 0, true // there is no completion to count
	return true
}

// readEvent: an embeddings answer is not a stream; one that comes as a
// stream is passed on and settled at its end with the counted input.
func (openAIEmbeddings) readEvent(_ *proxyCall, s *usageSeen, _ []byte) (end, pass bool) {
	s.final = true
	return false, true
}
