package custody

import "github.com/tokenring/tokenring/ring"

// Member is one live member of a membership view, as gossip shows it: the
// quorum counts them (Quorum.Observe), and the shell turns them into the
// machine's View (ids by MemberID).
type Member struct {
	ring.Member
	Boot     string
	Leaving  bool // alive, but not in the ring: handing its partitions on
	Departed bool // leaving, and done: handed everything on, about to go (quorum.go)
}

// MemberID is how custody names a member: a restarted process is a new
// member, since it lost its RAM.
func MemberID(name, boot string) string {
	if boot == "" {
		return name
	}
	return name + "/" + boot
}
