package limiter

// When a request fits: which dimension blocks it, and how long until it
// would fit if nothing else happened (the exact retry-after of a refusal).

// neverFits is the first dimension, requests, tokens, spend, whose limit n
// exceeds on its own, so that it can never fit: None if it can. (Its one
// slot always fits a concurrency limit.)
func (b *Budget) neverFits(n need) Dimension {
	if l := b.lim.Requests; l > 0 && n.req > l {
		return Requests
	}
	if l := b.lim.Tokens; l > 0 && n.tok > l {
		return Tokens
	}
	if l := b.lim.Spend; l > 0 && n.cost > l {
		return Spend
	}
	return None
}

// blocking is the first dimension, in the order requests, tokens,
// concurrency, spend, that has no room for n now; None if n fits.
func (b *Budget) blocking(n need) Dimension {
	if l := b.lim.Requests; l > 0 && b.sumReq+n.req > l {
		return Requests
	}
	if l := b.lim.Tokens; l > 0 && b.sumTok+n.tok > l {
		return Tokens
	}
	if l := b.lim.Concurrency; l > 0 && int64(len(b.leases))+n.slots > l {
		return Concurrency
	}
	if l := b.lim.Spend; l > 0 && b.spendUsed()+n.cost > l {
		return Spend
	}
	return None
}

// fitAfter returns how long after t every dimension has room for n if
// nothing else happens (no admission, settle or release): 0 if n fits now.
// Each dimension only frees up with time, so this is the latest of their
// times (spend's a bound: fitSpend). ok is false if n can never fit.
func (b *Budget) fitAfter(t int64, n need) (wait int64, ok bool) {
	wr, ok1 := b.fitWindow(t, 0, b.lim.Requests, b.sumReq, n.req)
	wt, ok2 := b.fitWindow(t, b.ring(), b.lim.Tokens, b.sumTok, n.tok)
	ws, ok3 := b.fitSlots(t, n.slots)
	ok4 := b.lim.Spend <= 0 || n.cost <= b.lim.Spend
	return max(wr, wt, ws, b.fitSpend(t, n.cost)), ok1 && ok2 && ok3 && ok4
}

// fitSlots returns how long after t n more slots are free: the time the
// (in use + n − limit)-th earliest lease expires.
func (b *Budget) fitSlots(t int64, n int64) (wait int64, ok bool) {
	l := b.lim.Concurrency
	if l <= 0 {
		return 0, true
	}
	if n > l {
		return 0, false
	}
	excess := int64(len(b.leases)) + n - l
	if excess <= 0 {
		return 0, true
	}
	var buf [64]int64
	exp := buf[:0]
	for _, ls := range b.leases {
		exp = append(exp, ls.expiry)
	}
	kth := selectKth(exp, int(excess-1))
	return max(0, kth-t), true
}

// fitBehind returns how long after t a request needing n fits once the
// queue head (needing hn, fitting hw after t) has been admitted at t+hw.
func (b *Budget) fitBehind(t int64, hn need, hw int64, n need) int64 {
	th := t + hw
	kh := max(b.head, floorDiv(th, b.width))
	wr := b.fitWindowWith(t, 0, b.lim.Requests, b.sumReq, n.req, kh, hn.req)
	wt := b.fitWindowWith(t, b.ring(), b.lim.Tokens, b.sumTok, n.tok, kh, hn.tok)
	var ws int64
	if l := b.lim.Concurrency; l > 0 {
		if excess := int64(len(b.leases)) + hn.slots + n.slots - l; excess > 0 {
			var buf [64]int64
			exp := append(buf[:0], th+int64(b.lim.LeaseTTL))
			for _, ls := range b.leases {
				exp = append(exp, ls.expiry)
			}
			ws = max(0, selectKth(exp, int(min(excess, int64(len(exp)))-1))-t)
		}
	}
	return max(hw, wr, wt, ws, b.fitSpend(t, hn.cost+n.cost))
}

// selectKth returns the k-th smallest element (0-based) of s, reordering s.
func selectKth(s []int64, k int) int64 {
	lo, hi := 0, len(s)-1
	for lo < hi {
		p := s[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for s[i] < p {
				i++
			}
			for s[j] > p {
				j--
			}
			if i <= j {
				s[i], s[j] = s[j], s[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return s[k]
		}
	}
	return s[k]
}
