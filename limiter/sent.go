package limiter

// SetSentLimits gives the Budget the requests, tokens and concurrency of
// l, limits a request sent (a gateway that keeps its keys' limits in its
// own database); its window, lease TTL and ReserveMode stay. They hold
// until a request sends others: a table's limitsFor no longer gives the
// Budget its numbers (Table.LimitsChanged gives it only the rest). The window keeps what it counted:
// a lowered limit refuses until the window drains below it, a raised one
// admits at once. Snapshots do not carry limits, so a Budget restored
// elsewhere takes its table's limits until the next request sends them
// again. It reports whether the limits changed.
func (b *Budget) SetSentLimits(l Limits) bool {
	next := b.lim
	next.Requests, next.Tokens, next.Concurrency = l.Requests, l.Tokens, l.Concurrency
	next = next.normalize()
	b.sent = true
	if next == b.lim {
		return false
	}
	b.SetLimits(next)
	return true
}
