package ring

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"
)

// members returns n members called n1..nn with addresses derived from the
// name.
func members(n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		name := fmt.Sprintf("n%d", i+1)
		ms[i] = Member{Name: name, HTTP: name + ":8080", Peer: name + ":7000", Gossip: name + ":7946"}
	}
	return ms
}

func mustNew(t testing.TB, cfg Config, ms []Member) *Ring {
	t.Helper()
	r, err := New(cfg, ms)
	if err != nil {
		t.Fatalf("New(%+v, %d members): %v", cfg, len(ms), err)
	}
	return r
}

// genConfig draws a valid Config, sometimes with zero (default) fields.
func genConfig(t *rapid.T) Config {
	return Config{
		PartitionCount:    rapid.OneOf(rapid.Just(0), rapid.IntRange(1, 600)).Draw(t, "partitions"),
		ReplicationFactor: rapid.OneOf(rapid.Just(0), rapid.IntRange(1, 40)).Draw(t, "replication"),
		Load:              rapid.OneOf(rapid.Just(0.0), rapid.Just(1.0), rapid.Float64Range(1, 3)).Draw(t, "load"),
	}
}

// genMembers draws up to max members with distinct names and some
// addresses.
func genMembers(t *rapid.T, max int) []Member {
	names := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z][a-z0-9-]{0,11}`), 0, max, rapid.ID[string]).Draw(t, "names")
	ms := make([]Member, len(names))
	for i, n := range names {
		ms[i] = Member{
			Name:   n,
			HTTP:   rapid.StringMatching(`127\.0\.0\.1:[0-9]{1,5}`).Draw(t, "http"),
			Peer:   rapid.StringMatching(`127\.0\.0\.1:[0-9]{1,5}`).Draw(t, "peer"),
			Gossip: rapid.StringMatching(`127\.0\.0\.1:[0-9]{1,5}`).Draw(t, "gossip"),
		}
	}
	return ms
}

// TestShuffledIdentical checks that the order of the member list does not
// matter: same Version, members, owners, backups and counts.
func TestShuffledIdentical(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		ms := genMembers(t, 12)
		shuffled := rapid.Permutation(ms).Draw(t, "shuffled")

		a, err := New(cfg, ms)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		b, err := New(cfg, shuffled)
		if err != nil {
			t.Fatalf("New shuffled: %v", err)
		}
		if a.Version() != b.Version() {
			t.Fatalf("versions differ: %s vs %s", a.Version(), b.Version())
		}
		if !slices.Equal(a.Members(), b.Members()) {
			t.Fatalf("members differ: %v vs %v", a.Members(), b.Members())
		}
		if a.PartitionCount() != b.PartitionCount() {
			t.Fatalf("partition counts differ")
		}
		for p := range a.PartitionCount() {
			ao, aok := a.PartitionOwner(p)
			bo, bok := b.PartitionOwner(p)
			if ao != bo || aok != bok {
				t.Fatalf("partition %d: owner %v,%v vs %v,%v", p, ao, aok, bo, bok)
			}
			ab, aok := a.PartitionBackup(p)
			bb, bok := b.PartitionBackup(p)
			if ab != bb || aok != bok {
				t.Fatalf("partition %d: backup %v,%v vs %v,%v", p, ab, aok, bb, bok)
			}
		}
		if m := Moves(a, b); len(m) != 0 {
			t.Fatalf("Moves between identical rings: %v", m)
		}
	})
}

// TestPartitionBounds checks that the counts add up and that no member owns
// more than the load bound allows.
func TestPartitionBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		ms := genMembers(t, 20)
		r, err := New(cfg, ms)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		full := cfg.withDefaults()
		if r.PartitionCount() != full.PartitionCount {
			t.Fatalf("PartitionCount() = %d, want %d", r.PartitionCount(), full.PartitionCount)
		}
		counts := r.Partitions()
		if len(counts) != len(ms) {
			t.Fatalf("Partitions() has %d entries, want %d", len(counts), len(ms))
		}
		if len(ms) == 0 {
			return
		}
		bound := int(math.Ceil(float64(full.PartitionCount) / float64(len(ms)) * full.Load))
		sum := 0
		for _, m := range ms {
			c, ok := counts[m.Name]
			if !ok {
				t.Fatalf("member %q missing from Partitions()", m.Name)
			}
			if c > bound {
				t.Fatalf("member %q owns %d partitions, bound %d", m.Name, c, bound)
			}
			if got := len(r.OwnedPartitions(m.Name)); got != c {
				t.Fatalf("OwnedPartitions(%q) has %d, Partitions says %d", m.Name, got, c)
			}
			sum += c
		}
		if sum != full.PartitionCount {
			t.Fatalf("counts add up to %d, want %d", sum, full.PartitionCount)
		}
		for p := range r.PartitionCount() {
			o, ok := r.PartitionOwner(p)
			if !ok {
				t.Fatalf("partition %d has no owner", p)
			}
			b, ok := r.PartitionBackup(p)
			if ok != (len(ms) > 1) {
				t.Fatalf("partition %d: backup ok=%v with %d members", p, ok, len(ms))
			}
			if ok && b.Name == o.Name {
				t.Fatalf("partition %d: backup is the owner %q", p, o.Name)
			}
		}
	})
}

// fataler is what checkMoves needs of a *testing.T or *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkMoves checks Moves(prev, next) against PartitionOwner of both rings.
func checkMoves(t fataler, prev, next *Ring) []Move {
	t.Helper()
	moves := Moves(prev, next)
	byPart := make(map[int]Move, len(moves))
	last := -1
	for _, m := range moves {
		if m.Partition <= last {
			t.Fatalf("moves not in increasing order: %v", moves)
		}
		last = m.Partition
		byPart[m.Partition] = m
	}
	for p := range next.PartitionCount() {
		from, _ := prev.PartitionOwner(p)
		to, _ := next.PartitionOwner(p)
		m, moved := byPart[p]
		if moved != (from.Name != to.Name) {
			t.Fatalf("partition %d: moved=%v but owners %q -> %q", p, moved, from.Name, to.Name)
		}
		if moved && (m.From != from.Name || m.To != to.Name) {
			t.Fatalf("partition %d: move %+v, owners %q -> %q", p, m, from.Name, to.Name)
		}
	}
	return moves
}

func TestMovesJoin(t *testing.T) {
	prev := mustNew(t, Config{}, members(3))
	next := mustNew(t, Config{}, members(4))
	moves := checkMoves(t, prev, next)
	if len(moves) == 0 {
		t.Fatal("a join moved nothing")
	}
	toJoiner, between := 0, 0
	for _, m := range moves {
		if m.From == "" || m.To == "" {
			t.Fatalf("move %+v with an empty side", m)
		}
		if m.To == "n4" {
			toJoiner++
		} else {
			between++
		}
	}
	if want := next.Partitions()["n4"]; toJoiner != want {
		t.Fatalf("%d moves to the joiner, it owns %d", toJoiner, want)
	}
	t.Logf("join of n4 to 3 members: %d of %d partitions moved, %d to the joiner, %d between old members",
		len(moves), next.PartitionCount(), toJoiner, between)

	// Leave is the reverse of the join.
	back := checkMoves(t, next, prev)
	if len(back) != len(moves) {
		t.Fatalf("leave moved %d partitions, join moved %d", len(back), len(moves))
	}
}

// TestMovesBetweenSurvivors pins a case where bounded load moves partitions
// between members present in both rings: when n2 leaves n1..n4, some
// partitions move between n1, n3 and n4, not only away from n2. Handoff must
// cope with any move, and Moves must list these too.
func TestMovesBetweenSurvivors(t *testing.T) {
	ms := members(4)
	prev := mustNew(t, Config{}, ms)
	next := mustNew(t, Config{}, []Member{ms[0], ms[2], ms[3]})
	moves := checkMoves(t, prev, next)
	fromLeaver, between := 0, 0
	for _, m := range moves {
		if m.From == "n2" {
			fromLeaver++
		} else {
			between++
		}
	}
	if fromLeaver != prev.Partitions()["n2"] {
		t.Fatalf("%d moves from n2, it owned %d", fromLeaver, prev.Partitions()["n2"])
	}
	if between == 0 {
		t.Fatal("no move between survivors; this placement is pinned, see TestOwnerStable")
	}
	t.Logf("leave of n2 from 4 members: %d moves, %d from the leaver, %d between survivors", len(moves), fromLeaver, between)
}

func TestMovesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		all := genMembers(t, 10)
		prevMs := rapid.SliceOfDistinct(rapid.SampledFrom(append(all, Member{Name: "x"})), func(m Member) string { return m.Name }).Draw(t, "prev")
		nextMs := rapid.SliceOfDistinct(rapid.SampledFrom(append(all, Member{Name: "x"})), func(m Member) string { return m.Name }).Draw(t, "next")
		prev, err := New(cfg, prevMs)
		if err != nil {
			t.Fatalf("New prev: %v", err)
		}
		next, err := New(cfg, nextMs)
		if err != nil {
			t.Fatalf("New next: %v", err)
		}
		checkMoves(t, prev, next)
	})
}

func TestMovesNilAndEmpty(t *testing.T) {
	r := mustNew(t, Config{PartitionCount: 31}, members(3))
	empty := mustNew(t, Config{PartitionCount: 31}, nil)

	for _, prev := range []*Ring{nil, empty} {
		moves := Moves(prev, r)
		if len(moves) != 31 {
			t.Fatalf("Moves(%v, r) = %d moves, want 31", prev, len(moves))
		}
		for p, m := range moves {
			o, _ := r.PartitionOwner(p)
			if m != (Move{Partition: p, From: "", To: o.Name}) {
				t.Fatalf("move %d = %+v, want from \"\" to %q", p, m, o.Name)
			}
		}
	}
	for _, next := range []*Ring{nil, empty} {
		moves := Moves(r, next)
		if len(moves) != 31 {
			t.Fatalf("Moves(r, %v) = %d moves, want 31", next, len(moves))
		}
		for p, m := range moves {
			o, _ := r.PartitionOwner(p)
			if m != (Move{Partition: p, From: o.Name, To: ""}) {
				t.Fatalf("move %d = %+v, want from %q to \"\"", p, m, o.Name)
			}
		}
	}
	if m := Moves(nil, nil); m != nil {
		t.Fatalf("Moves(nil, nil) = %v", m)
	}
	if m := Moves(empty, empty); m != nil {
		t.Fatalf("Moves(empty, empty) = %v", m)
	}
	// Different partition counts: prev is ignored.
	other := mustNew(t, Config{PartitionCount: 7}, members(3))
	if m := Moves(other, r); len(m) != 31 || m[0].From != "" {
		t.Fatalf("Moves across partition counts = %v", m)
	}
}

func TestEmptyRing(t *testing.T) {
	for _, ms := range [][]Member{nil, {}} {
		r := mustNew(t, Config{}, ms)
		if r.PartitionCount() != DefaultPartitionCount {
			t.Fatalf("PartitionCount() = %d", r.PartitionCount())
		}
		if m, ok := r.Owner("acme"); ok || m != (Member{}) {
			t.Fatalf("Owner on an empty ring = %v, %v", m, ok)
		}
		if _, ok := r.Backup("acme"); ok {
			t.Fatal("Backup on an empty ring is ok")
		}
		if p := r.Partition("acme"); p < 0 || p >= DefaultPartitionCount {
			t.Fatalf("Partition = %d", p)
		}
		if _, ok := r.PartitionOwner(0); ok {
			t.Fatal("PartitionOwner(0) on an empty ring is ok")
		}
		if len(r.Members()) != 0 || len(r.Partitions()) != 0 || r.OwnedPartitions("n1") != nil {
			t.Fatalf("empty ring has members: %v %v", r.Members(), r.Partitions())
		}
		if r.Version() == "" || r.Version() == mustNew(t, Config{}, members(1)).Version() {
			t.Fatalf("Version() = %q", r.Version())
		}
	}
}

func TestSingleMember(t *testing.T) {
	r := mustNew(t, Config{}, members(1))
	for i := range 100 {
		key := fmt.Sprintf("k%d", i)
		if m, ok := r.Owner(key); !ok || m.Name != "n1" || m.HTTP != "n1:8080" {
			t.Fatalf("Owner(%q) = %v, %v", key, m, ok)
		}
		if _, ok := r.Backup(key); ok {
			t.Fatalf("Backup(%q) with one member is ok", key)
		}
	}
	if got := r.Partitions()["n1"]; got != DefaultPartitionCount {
		t.Fatalf("n1 owns %d", got)
	}
}

func TestOutOfRange(t *testing.T) {
	r := mustNew(t, Config{PartitionCount: 13}, members(3))
	for _, p := range []int{-1, 13, 1 << 40} {
		if _, ok := r.PartitionOwner(p); ok {
			t.Fatalf("PartitionOwner(%d) ok", p)
		}
		if _, ok := r.PartitionBackup(p); ok {
			t.Fatalf("PartitionBackup(%d) ok", p)
		}
	}
	if got := r.OwnedPartitions("nobody"); got != nil {
		t.Fatalf("OwnedPartitions(nobody) = %v", got)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		members []Member
		want    string
	}{
		{"negative partitions", Config{PartitionCount: -1}, members(3), "partition count"},
		{"too many partitions", Config{PartitionCount: MaxPartitionCount + 1}, members(3), "partition count"},
		{"negative replication", Config{ReplicationFactor: -5}, members(3), "replication factor"},
		{"too much replication", Config{ReplicationFactor: MaxReplicationFactor + 1}, members(3), "replication factor"},
		{"load below 1", Config{Load: 0.5}, members(3), "load"},
		{"negative load", Config{Load: -1}, members(3), "load"},
		{"NaN load", Config{Load: math.NaN()}, members(3), "load"},
		{"infinite load", Config{Load: math.Inf(1)}, members(3), "load"},
		{"empty name", Config{}, []Member{{Name: "a"}, {Name: ""}}, "empty name"},
		{"duplicate name", Config{}, []Member{{Name: "a"}, {Name: "b"}, {Name: "a", HTTP: "x"}}, `duplicate member name "a"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg, tc.members)
			if err == nil || r != nil {
				t.Fatalf("New = %v, %v; want an error", r, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// constHasher puts every virtual node and partition at the same point of
// the circle, so that one member gets all the virtual nodes and consistent
// runs out of room.
type constHasher struct{}

func (constHasher) Sum64([]byte) uint64 { return 42 }

func TestPanicBecomesError(t *testing.T) {
	r, err := build(Config{}, members(2), constHasher{})
	if err == nil || r != nil {
		t.Fatalf("build = %v, %v; want an error", r, err)
	}
	if !strings.Contains(err.Error(), "not enough room") {
		t.Fatalf("error %q does not carry consistent's panic", err)
	}
}

// TestOwnerStable checks 1,000 keys against consistent itself, across
// shuffles, and against a golden digest so that a change of placement (a new
// version of consistent or xxhash, a change here) cannot slip in unnoticed:
// nodes of different versions must agree on owners during a rolling upgrade.
func TestOwnerStable(t *testing.T) {
	ms := members(5)
	r := mustNew(t, Config{}, ms)

	cms := make([]consistent.Member, len(ms))
	for i, m := range ms {
		cms[i] = m
	}
	c := consistent.New(cms, consistent.Config{Hasher: hasher{}, PartitionCount: DefaultPartitionCount, ReplicationFactor: DefaultReplicationFactor, Load: DefaultLoad})

	digest := xxhash.New()
	owners := make([]string, 1000)
	for i := range owners {
		key := fmt.Sprintf("tenant-%d", i)
		m, ok := r.Owner(key)
		if !ok {
			t.Fatalf("Owner(%q) not ok", key)
		}
		owners[i] = m.Name
		if want := c.FindPartitionID([]byte(key)); r.Partition(key) != want {
			t.Fatalf("Partition(%q) = %d, consistent says %d", key, r.Partition(key), want)
		}
		if want := c.LocateKey([]byte(key)).String(); m.Name != want {
			t.Fatalf("Owner(%q) = %q, consistent says %q", key, m.Name, want)
		}
		closest, err := c.GetClosestN([]byte(key), 2)
		if err != nil {
			t.Fatal(err)
		}
		if b, ok := r.Backup(key); !ok || b.Name != closest[1].String() {
			t.Fatalf("Backup(%q) = %v, %v; consistent says %v", key, b, ok, closest[1])
		}
		fmt.Fprintf(digest, "%s=%s;", key, m.Name)
	}
	for i := range 5 {
		shuffled := slices.Clone(ms)
		slices.Reverse(shuffled)
		shuffled[0], shuffled[i] = shuffled[i], shuffled[0]
		r2 := mustNew(t, Config{}, shuffled)
		for j, want := range owners {
			key := fmt.Sprintf("tenant-%d", j)
			if m, _ := r2.Owner(key); m.Name != want {
				t.Fatalf("shuffle %d: Owner(%q) = %q, want %q", i, key, m.Name, want)
			}
		}
	}
	const golden = "b2688eb841c41371"
	if got := fmt.Sprintf("%016x", digest.Sum64()); got != golden {
		t.Errorf("placement of 1,000 keys changed: digest %s, golden %s", got, golden)
	}
}

func TestVersion(t *testing.T) {
	base := mustNew(t, Config{}, members(3)).Version()
	if len(base) != 16 {
		t.Fatalf("Version() = %q, want 16 hex digits", base)
	}
	changed := members(3)
	changed[1].Peer = "elsewhere:7000"
	if v := mustNew(t, Config{}, changed).Version(); v == base {
		t.Fatal("changing an address did not change the version")
	}
	if v := mustNew(t, Config{Load: 1.5}, members(3)).Version(); v == base {
		t.Fatal("changing the config did not change the version")
	}
	if v := mustNew(t, Config{PartitionCount: DefaultPartitionCount, ReplicationFactor: DefaultReplicationFactor, Load: DefaultLoad}, members(3)).Version(); v != base {
		t.Fatal("explicit defaults changed the version")
	}
	// Length prefixes keep fields apart.
	a := mustNew(t, Config{}, []Member{{Name: "ab", HTTP: "c"}}).Version()
	b := mustNew(t, Config{}, []Member{{Name: "a", HTTP: "bc"}}).Version()
	if a == b {
		t.Fatal("versions collide across field boundaries")
	}
}

func TestMembersIsACopy(t *testing.T) {
	in := members(3)
	r := mustNew(t, Config{}, in)
	in[0].Name = "changed"
	got := r.Members()
	got[1].Name = "changed too"
	if ms := r.Members(); ms[0].Name != "n1" || ms[1].Name != "n2" {
		t.Fatalf("ring shares its members: %v", ms)
	}
}

func TestOwnerDoesNotAllocate(t *testing.T) {
	r := mustNew(t, Config{}, members(5))
	if n := testing.AllocsPerRun(1000, func() { _, _ = r.Owner("tenant-acme") }); n != 0 {
		t.Fatalf("Owner allocates %v times", n)
	}
}

func TestNewDoesNotPanicOnErrors(t *testing.T) {
	// Any error must be an error value, whatever rapid throws at New.
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			PartitionCount:    rapid.IntRange(-10, 2000).Draw(t, "partitions"),
			ReplicationFactor: rapid.IntRange(-10, 50).Draw(t, "replication"),
			Load:              rapid.Float64Range(-2, 4).Draw(t, "load"),
		}
		names := rapid.SliceOfN(rapid.StringMatching(`[a-c]{0,2}`), 0, 8).Draw(t, "names")
		ms := make([]Member, len(names))
		for i, n := range names {
			ms[i] = Member{Name: n}
		}
		r, err := New(cfg, ms)
		if (r == nil) == (err == nil) {
			t.Fatalf("New = %v, %v", r, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "ring: ") {
			t.Fatalf("error without context: %v", err)
		}
	})
}

func BenchmarkOwner(b *testing.B) {
	r := mustNew(b, Config{}, members(10))
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, ok := r.Owner(keys[i&1023]); !ok {
			b.Fatal("no owner")
		}
		i++
	}
}

func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ms := members(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(Config{}, ms); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// PartitionBackups: the first is PartitionBackup; none is the owner or
// repeated; there are min(n, members-1, MaxBackups) of them; a shorter
// list is a prefix of a longer one.
func TestPartitionBackups(t *testing.T) {
	for _, size := range []int{1, 2, 3, 5, 12} {
		r, err := New(Config{}, members(size))
		if err != nil {
			t.Fatal(err)
		}
		for p := range r.PartitionCount() {
			o, _ := r.PartitionOwner(p)
			all := r.PartitionBackups(p, MaxBackups+3)
			if want := min(size-1, MaxBackups); len(all) != want {
				t.Fatalf("%d members, partition %d: %d backups, want %d", size, p, len(all), want)
			}
			seen := map[string]bool{o.Name: true}
			for _, b := range all {
				if seen[b.Name] {
					t.Fatalf("%d members, partition %d: %q is the owner or repeated in %v", size, p, b.Name, all)
				}
				seen[b.Name] = true
			}
			if b, ok := r.PartitionBackup(p); ok != (len(all) > 0) || (ok && b.Name != all[0].Name) {
				t.Fatalf("partition %d: PartitionBackup %v %v, PartitionBackups %v", p, b, ok, all)
			}
			for n := range len(all) {
				if got := r.PartitionBackups(p, n); !slices.Equal(got, all[:n]) {
					t.Fatalf("partition %d: %d backups %v, not a prefix of %v", p, n, got, all)
				}
			}
		}
	}
	if got := (&Ring{}).PartitionBackups(-1, 2); got != nil {
		t.Fatalf("out of range: %v", got)
	}
}
