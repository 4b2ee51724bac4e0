// Package fallback is what a node decides on its own when a key's owner
// cannot be reached: the fallback policies (Policy), each key's degraded
// share (State: the owner's last report, this node's local window of
// limit ÷ members, the debts owed), and the debts' repayment to the
// owners once they are reachable again (Debts).
//
// Invariants:
//   - in any window, this node's degraded share never admits more than a
//     key's limit ÷ members, nor more than the owner's last fresh report of
//     what remained ÷ members, less what it admitted since;
//   - every fallback admission is a debt, owed until an owner acknowledges
//     it (paid at least once) or it is older than its key's window;
//   - memory is bounded: a new key past the cap takes the place of one
//     that holds nothing, or is refused (FullRetry); every call does O(1)
//     work;
//   - no goroutine runs unless some key owes (the debts' loop).
//
// It imports limiter only, of this module's packages: the calls to
// owners are the caller's (DebtsConfig.Charge), as is the choice to fall
// back (router).
package fallback
