package peer

import (
	"encoding/binary"
	"fmt"

	"github.com/tokenring/tokenring/node/internal/wire"
)

// A run is several calls for keys the caller believes one member owns,
// sent to it as one OpRun: consecutive keys of a request's chain. The
// member executes them one after the other, as if each had been forwarded
// on its own (each is routed by its own key), and stops at the first
// acquire refused or the first call that fails. Every acquire after the
// run's first that asks no reservation of its own (Req.Reserve 0) reserves
// what the first one reserved, as the router's chains do.
//
// On the wire a run's State is a uvarint count (1 to MaxRun) and each call
// as a string of AppendCall's bytes; its answer's State is a uvarint count,
// each answer as a string of AppendAnswer's bytes, and the error text of
// the call that stopped the run ("" when none failed).

// MaxRun bounds the calls of one run.
const MaxRun = 16

// AppendRun encodes calls (1 to MaxRun, none itself a run) as an OpRun's
// State onto b.
func AppendRun(b []byte, calls []Call) []byte {
	b = binary.AppendUvarint(b, uint64(len(calls)))
	var one []byte
	for i := range calls {
		one = AppendCall(one[:0], &calls[i])
		b = wire.AppendString(b, string(one))
	}
	return b
}

// runOps are the ops a run may hold: a chain's own.
func runOp(op Op) bool {
	switch op {
	case OpAcquire, OpSettle, OpRelease, OpCancel, OpRenew, OpStatus:
		return true
	}
	return false
}

// DecodeRun decodes the calls of an OpRun's State.
func DecodeRun(state []byte) ([]Call, error) {
	r := wire.NewReader(state)
	n := r.Uvarint()
	if r.Err() == nil && (n == 0 || n > MaxRun) {
		return nil, fmt.Errorf("decode run: %d calls, want 1 to %d", n, MaxRun)
	}
	calls := make([]Call, 0, n)
	for range n {
		b := r.Bytes()
		if r.Err() != nil {
			break
		}
		c, err := DecodeCall(b)
		if err != nil {
			return nil, fmt.Errorf("decode run: call %d: %w", len(calls), err)
		}
		if !runOp(c.Op) {
			return nil, fmt.Errorf("decode run: call %d: op %s cannot be part of a run", len(calls), c.Op)
		}
		calls = append(calls, c)
	}
	if r.Err() == nil && r.Len() != 0 {
		r.Fail(fmt.Errorf("%d trailing bytes", r.Len()))
	}
	if r.Err() != nil {
		return nil, fmt.Errorf("decode run: %w", r.Err())
	}
	return calls, nil
}

// AppendRunAnswers encodes the answers of a run's calls, and the error
// text of the call that stopped it ("" when none failed), onto b.
func AppendRunAnswers(b []byte, answers []Answer, failed string) []byte {
	b = binary.AppendUvarint(b, uint64(len(answers)))
	var one []byte
	for i := range answers {
		one = AppendAnswer(one[:0], &answers[i])
		b = wire.AppendString(b, string(one))
	}
	return wire.AppendString(b, failed)
}

// DecodeRunAnswers decodes the State of a run's answer: one answer for
// each call executed, in order, and the error text of the call after them
// that failed ("" when none did: the run ended or an acquire was refused).
func DecodeRunAnswers(state []byte) (answers []Answer, failed string, err error) {
	r := wire.NewReader(state)
	n := r.Uvarint()
	if r.Err() == nil && n > MaxRun {
		return nil, "", fmt.Errorf("decode run answers: %d answers, at most %d", n, MaxRun)
	}
	answers = make([]Answer, 0, n)
	for range n {
		b := r.Bytes()
		if r.Err() != nil {
			break
		}
		a, err := DecodeAnswer(OpStatus, b) // a run's ops all carry their sections in their State, as a status does
		if err != nil {
			return nil, "", fmt.Errorf("decode run answers: answer %d: %w", len(answers), err)
		}
		answers = append(answers, a)
	}
	failed = r.Text()
	if r.Err() == nil && r.Len() != 0 {
		r.Fail(fmt.Errorf("%d trailing bytes", r.Len()))
	}
	if r.Err() != nil {
		return nil, "", fmt.Errorf("decode run answers: %w", r.Err())
	}
	return answers, failed, nil
}
