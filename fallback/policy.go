package fallback

// Policy says what to do when a key's owner does not answer.
type Policy string

// The fallback policies, applied only when a key's owner is unreachable
// (docs/operations.md, "Fallback policies").
const (
	Degraded Policy = "degraded" // strict local share: the owner's last reported remaining (or the limit) ÷ members, as debts
	Open     Policy = "open"     // admit, as debts
	Closed   Policy = "closed"   // refuse
)
