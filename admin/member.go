package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/tokenring/tokenring/ring"
)

// maxMemberAnswer bounds the bytes read of a member's answer.
const maxMemberAnswer = 4 << 20

// memberGet GETs path (with its query) from the member at addr, with this
// node's admin token, within statsTimeout, and decodes the JSON answer
// into v.
func (a *Server) memberGet(ctx context.Context, addr, path string, v any) error {
	if addr == "" {
		return fmt.Errorf("no HTTP address advertised")
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	if a.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.cfg.Token)
	}
	resp, err := statsClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMemberAnswer))
	if err != nil {
		return err
	}
	name, _, _ := strings.Cut(path, "?")
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", name, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", name, err)
	}
	return nil
}

// fanOut runs local for this node and remote for every other member of
// the ring, all at once, and returns the names of the members whose call
// failed, each with why ("n3: connection refused"), in ring order. Without
// a ring, local alone runs.
func (a *Server) fanOut(ctx context.Context, local func(), remote func(ctx context.Context, m ring.Member) error) []string {
	rg := a.cluster.Ring()
	if rg == nil {
		local()
		return nil
	}
	ms := rg.Members()
	errs := make([]string, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		if m.Name == a.cluster.Name() {
			local()
			continue
		}
		wg.Go(func() {
			if err := remote(ctx, m); err != nil {
				errs[i] = m.Name + ": " + err.Error()
			}
		})
	}
	wg.Wait()
	out := []string{}
	for _, e := range errs {
		if e != "" {
			out = append(out, e)
		}
	}
	return out
}

// member returns the ring's member called name.
func (a *Server) member(name string) (ring.Member, bool) {
	rg := a.cluster.Ring()
	if rg == nil {
		return ring.Member{}, false
	}
	for _, m := range rg.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return ring.Member{}, false
}
