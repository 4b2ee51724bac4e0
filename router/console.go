package router

import (
	"context"

	"github.com/tokenring/tokenring/node"
)

// GroupLevel returns the status of group's key at its owner, as Levels
// gives each level of a tenant's chain; unreachable is true (and the
// level empty) when the owner could not be reached and the fallback
// answered. For the admin console's search of a group.
func (r *Router) GroupLevel(ctx context.Context, group string) (l Level, unreachable bool, err error) {
	s := Side{Key: GroupKey(group), Kind: KeyGroup, Name: group}
	c := node.Call{Op: node.OpStatus, Key: s.Key}
	o, err := r.decide(ctx, &c, 0)
	if err != nil || o.fallback {
		return Level{}, o.fallback, err
	}
	return Level{Label: s.Label(), Key: s.Key, Owner: o.answer.Owner, Status: o.answer.Decision.Status}, false, nil
}
