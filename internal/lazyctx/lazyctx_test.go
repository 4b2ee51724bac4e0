package lazyctx

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTimeoutIsATimeout: asked for, the lazy context ends at its
// timeout like context.WithTimeout's; released unasked, it is cancelled
// (and made no timer); released after it was made, its timer stops.
func TestTimeoutIsATimeout(t *testing.T) {
	ctx, release := WithTimeout(context.Background(), 20*time.Millisecond)
	if ctx.ctx != nil {
		t.Fatal("made before anybody asked")
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
		t.Fatalf("deadline %v %v", d, ok)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("never done")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline's", ctx.Err())
	}
	release()

	ctx, release = WithTimeout(context.Background(), time.Hour)
	release()
	if ctx.ctx != cancelled || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("released unasked: %v, want cancelled without a timer", ctx.Err())
	}

	parent, cancelParent := context.WithCancel(context.Background())
	ctx, release = WithTimeout(parent, time.Hour)
	defer release()
	done := ctx.Done()
	cancelParent()
	<-done
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("parent cancelled: %v", ctx.Err())
	}
	type key struct{}
	vctx, vrelease := WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
	defer vrelease()
	if v := vctx.Value(key{}); v != "v" {
		t.Fatalf("value %v, want the parent's", v)
	}
}
