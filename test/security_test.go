package test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testSecret is the cluster secret of the secured clusters below (>= 32 bytes).
const testSecret = "tokenring-test-cluster-secret-0123456789"

const securedConfig = `
cluster_secret: "` + testSecret + `"
limits:
  default: {rpm: 5, tpm: 100000000, concurrency: 100}
`

// TestRogueNodeCannotJoin: a stock tokenringd without the cluster secret,
// whose default limits differ, tries to -join a secured cluster. It never
// becomes a member: the cluster keeps its two members and their ring, and
// tenants stay limited exactly (5 a window) whichever node is asked.
func TestRogueNodeCannotJoin(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 2, securedConfig)
	n1 := c.Nodes()[0]
	rogue := exec.Command(daemon, "-name", "rogue", "-http", fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		"-peer", fmt.Sprintf("127.0.0.1:%d", FreePort(t)), "-gossip", fmt.Sprintf("127.0.0.1:%d", FreePort(t)),
		"-join", n1.Gossip)
	rogue.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out lockedBuffer
	rogue.Stdout, rogue.Stderr = &out, &out
	if err := rogue.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = rogue.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = rogue.Process.Kill()
		<-exited
	})
	// The event: the rogue tries every join attempt it has (5, a second
	// apart), is refused each time, and gives up (it exits).
	select {
	case <-exited:
		t.Logf("the rogue node gave up: %v\n%s", waitErr, tail(out.String(), 5))
	case <-time.After(60 * time.Second):
		t.Fatalf("the rogue node neither joined nor gave up within 60 s:\n%s", tail(out.String(), 3000))
	}
	if !strings.Contains(out.String(), "gossip join failed") {
		t.Fatalf("the rogue node exited without trying to join (no \"gossip join failed\" in its log): the cluster was not put to the test\n%s", tail(out.String(), 3000))
	}
	for _, p := range c.Nodes() {
		var ring struct {
			Members []struct{ Name string } `json:"members"`
		}
		if err := p.GetJSON("/admin/ring", &ring); err != nil {
			t.Fatal(err)
		}
		if len(ring.Members) != 2 {
			t.Fatalf("%s's ring has %d members %v, want the 2 with the secret", p.Name, len(ring.Members), ring.Members)
		}
		for _, m := range ring.Members {
			if m.Name == "rogue" {
				t.Fatalf("%s counts the rogue node as a member", p.Name)
			}
		}
	}
	for _, p := range c.Nodes() {
		want := map[string]int{"n1": 5, "n2": 0}[p.Name]
		if admitted := acquireVictim(t, p, 8); admitted != want {
			t.Fatalf("through %s: %d admitted, want %d (5 a window in all)", p.Name, admitted, want)
		}
	}
}

// TestRawPeerClientChangesNothing: a local process without the secret
// connects to a secured node's peer port and sends a frame of the
// plaintext protocol (a take of a tenant's state). The node closes the
// connection and the tenant's count is untouched.
func TestRawPeerClientChangesNothing(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 1, securedConfig)
	n1 := c.Nodes()[0]
	if admitted := acquireVictim(t, n1, 3); admitted != 3 {
		t.Fatalf("%d of the first 3 acquires admitted", admitted)
	}
	conn, err := net.DialTimeout("tcp", n1.Peer, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A frame as the plaintext protocol has it: length, kind 1 (calls),
	// one item whose body names an op and the tenant's key.
	body := append([]byte{5}, "t:victim"...)
	item := binary.AppendUvarint(nil, 1)
	item = append(item, 0)
	item = binary.AppendUvarint(item, uint64(len(body)))
	item = append(item, body...)
	frame := binary.BigEndian.AppendUint32(nil, uint32(1+len(item)))
	frame = append(append(frame, 1), item...)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = conn.Write(frame)
	got, err := io.ReadAll(bufio.NewReader(conn))
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the node kept the connection of a client without the secret: %v (read %d bytes)", err, len(got))
	}
	if admitted := acquireVictim(t, n1, 5); admitted != 2 {
		t.Fatalf("after the raw peer client: %d more admitted, want exactly 2 (5 a window, 3 used)", admitted)
	}
}

// acquireVictim sends n acquires for tenant "victim" through p and returns
// how many were admitted.
func acquireVictim(t *testing.T, p *Proc, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		code, _, err := Post(context.Background(), http.DefaultClient, p.URL()+"/v1/acquire", `{"tenant":"victim","prompt_tokens":1}`)
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusOK {
			admitted++
		}
	}
	return admitted
}
