package gossip

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"
)

var (
	secretA = bytes.Repeat([]byte("a"), 32)
	secretB = bytes.Repeat([]byte("b"), 32)
)

// secretConfig is localConfig with secrets, giving up a join quickly.
func secretConfig(t *testing.T, name string, secrets [][]byte, join ...string) Config {
	cfg := localConfig(t, name, join...)
	cfg.Secrets = secrets
	cfg.JoinRetries = 1
	cfg.JoinRetryInterval = 50 * time.Millisecond
	cfg.TCPTimeout = time.Second
	return cfg
}

// TestSecretRefusesRogues: a member without the cluster's secret, with
// another secret, or with another label fails to join, and never shows up
// in the members of the cluster, which stays at its two members.
func TestSecretRefusesRogues(t *testing.T) {
	n1 := start(t, secretConfig(t, "n1", [][]byte{secretA}))
	n2 := start(t, secretConfig(t, "n2", [][]byte{secretA}, n1.Local().Addr))
	cs := []*Cluster{n1, n2}
	waitFor(t, 5*time.Second, "2 members everywhere", func() bool { return allSee(cs, "n1", "n2") })

	rogues := map[string]Config{
		"no-secret":      secretConfig(t, "rogue-plain", nil, n1.Local().Addr),
		"other-secret":   secretConfig(t, "rogue-other", [][]byte{secretB}, n1.Local().Addr),
		"secondary-only": secretConfig(t, "rogue-second", [][]byte{secretB, secretA}, n1.Local().Addr),
	}
	label := secretConfig(t, "rogue-label", [][]byte{secretA}, n1.Local().Addr)
	label.Label = "another-product"
	rogues["other-label"] = label
	for what, cfg := range rogues {
		c, err := Start(cfg)
		if err == nil {
			_ = c.Shutdown()
			t.Errorf("%s: rogue %s joined", what, cfg.Name)
			continue
		}
		t.Logf("%s: %v", what, err)
	}
	// Give the cluster several gossip and push/pull rounds to learn of any
	// rogue that got a message through.
	time.Sleep(1500 * time.Millisecond)
	for _, c := range cs {
		if n, names := c.NumMembers(), memberNames(c.Members()); n != 2 || !slices.Equal(names, []string{"n1", "n2"}) {
			t.Errorf("%s sees %d members %v, want 2 [n1 n2]", c.LocalName(), n, names)
		}
	}
}

// TestSecretRotation: the steps of a rotation from secret A to secret B,
// {A} → {A, B} → {B, A} → {B} (primary first), each interoperate with the
// step before, while {A} and {B} alone do not.
func TestSecretRotation(t *testing.T) {
	steps := [][][]byte{{secretA}, {secretA, secretB}, {secretB, secretA}, {secretB}}
	for i := 0; i+1 < len(steps); i++ {
		t.Run(fmt.Sprintf("step%d-to-%d", i, i+1), func(t *testing.T) {
			n1 := start(t, secretConfig(t, "n1", steps[i]))
			n2 := start(t, secretConfig(t, "n2", steps[i+1], n1.Local().Addr))
			cs := []*Cluster{n1, n2}
			waitFor(t, 5*time.Second, "2 members everywhere", func() bool { return allSee(cs, "n1", "n2") })
			// Updates flow both ways: each side's metadata change reaches the other.
			for _, c := range cs {
				if err := c.SetLeaving(2 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 5*time.Second, "both see both leaving", func() bool {
				for _, c := range cs {
					for _, m := range c.Members() {
						if !m.Meta.Leaving {
							return false
						}
					}
				}
				return true
			})
		})
	}
	n1 := start(t, secretConfig(t, "n1", [][]byte{secretA}))
	if c, err := Start(secretConfig(t, "n2", [][]byte{secretB}, n1.Local().Addr)); err == nil {
		_ = c.Shutdown()
		t.Fatal("{B} joined {A}")
	}
	if n := n1.NumMembers(); n != 1 {
		t.Fatalf("n1 sees %d members, want 1", n)
	}
}

// TestLimitsHashGossiped: a member's LimitsHash reaches the others.
func TestLimitsHashGossiped(t *testing.T) {
	cfg1 := secretConfig(t, "n1", [][]byte{secretA})
	cfg1.Meta.LimitsHash = "1111111111111111"
	n1 := start(t, cfg1)
	cfg2 := secretConfig(t, "n2", [][]byte{secretA}, n1.Local().Addr)
	cfg2.Meta.LimitsHash = "2222222222222222"
	n2 := start(t, cfg2)
	waitFor(t, 5*time.Second, "hashes everywhere", func() bool {
		for _, c := range []*Cluster{n1, n2} {
			got := map[string]string{}
			for _, m := range c.Members() {
				got[m.Name] = m.Meta.LimitsHash
			}
			if got["n1"] != cfg1.Meta.LimitsHash || got["n2"] != cfg2.Meta.LimitsHash {
				return false
			}
		}
		return true
	})
}
