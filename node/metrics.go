package node

import (
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/node/custody"
)

// Collectors returns the node's Prometheus collectors, for the caller to
// register (nothing is registered globally).
func (n *Node) Collectors() []prometheus.Collector {
	return append(append(append(n.peerCollectors(), n.allotCollectors()...), n.replicaCollectors()...), []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_keys", Help: "Keys whose limiter state this node holds.",
		}, func() float64 { return float64(n.table.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_waiters", Help: "Requests queued on this node waiting for capacity.",
		}, func() float64 { return float64(n.local.waiting()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_overdrawn_tokens_total",
			Help: "Tokens that settles of keys this node owns charged past the key's token limit: real usage beyond the reservation, where the window had no room for it (see limits' reservation).",
		}, func() float64 { return float64(n.local.overdrawn.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_forwarded_calls_total", Help: "Calls forwarded to their owner on another node.",
		}, func() float64 { return float64(n.peerStats.Calls.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_forward_frames_total", Help: "Frames written to peers; forwarded calls ÷ frames is the batching factor.",
		}, func() float64 { return float64(n.peerStats.Frames.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_peer_unreachable_total", Help: "Connections to peers that failed (refused, timed out).",
		}, func() float64 { return float64(n.peerStats.Downs.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_handoff_received_total", Help: "Partitions whose custody this node received from another node.",
		}, func() float64 { return float64(n.custodyStats().Received) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_handoff_given_total", Help: "Partitions whose custody this node handed to another node (acknowledged).",
		}, func() float64 { return float64(n.custodyStats().Given) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_handoff_orphans_total", Help: "Partitions this node restored (from replicas and checkpoint, key by key) because their custodian died.",
		}, func() float64 { return float64(n.custodyStats().Orphans) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_reset_while_holder_alive_total",
			Help: "Partitions started over while a live member held them (an offer reaching a custodian, a restore while a live member held it). Always 0 when handoff works.",
		}, func() float64 { return float64(n.custodyStats().Conflicts) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_quorum_leased",
			Help: "1 while this node has heard from a majority of the membership within its mandate's term and decides for what it holds; 0 while its calls fall back.",
		}, func() float64 { return b2f(n.Mandated()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_fenced",
			Help: "1 while this node is fenced off: its membership view has no majority (the minority side of a split); it owns nothing and serves degraded shares as debts.",
		}, func() float64 { return b2f(n.fenced.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_fences_total", Help: "Times this node fenced itself off and rejoined as a new member.",
		}, func() float64 { return float64(n.fences.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_partitions_held", Help: "Partitions this node is custodian of.",
		}, func() float64 {
			if t := n.tr.Load(); t != nil {
				return float64(t.held())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_members", Help: "Members in this node's ring.",
		}, func() float64 {
			if r := n.ring.Load(); r != nil {
				return float64(len(r.Members()))
			}
			return 0
		}),
	}...)
}

// replicaCollectors are the collectors of replication, the checkpoint and
// the recoveries from them.
func (n *Node) replicaCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_replicated_total", Help: "Key snapshots this node sent to their backups.",
		}, func() float64 { return float64(n.repl.Stats.Replicated.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_restored_from_replica_total", Help: "Keys this node recovered from a backup's replica after their owner crashed.",
		}, func() float64 { return float64(n.counts.fromReplica.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_sync_replication_missed_total", Help: "Changes answered without their backup holding them (sync mode, backup unreachable): copied by the next round instead.",
		}, func() float64 { return float64(n.repl.Stats.SyncMissed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_checkpointed_total", Help: "Key snapshots written to the checkpoint store (Redis).",
		}, func() float64 { return float64(n.repl.Stats.Checkpointed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_restored_from_checkpoint_total", Help: "Keys this node recovered from the checkpoint store after their owner crashed (no newer replica).",
		}, func() float64 { return float64(n.counts.fromCheckpoint.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_unreplicated", Help: "Changed keys not yet copied to their backup (0: every change so far is replicated).",
		}, func() float64 { return float64(n.Unreplicated()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokenring_replicas", Help: "Keys this node holds a replica of, as their backup.",
		}, func() float64 { return float64(n.replicas.Len()) }),
	}
}

// counters count what the node's own machinery did, for metrics and tests
// (the peer protocol's traffic is peer.Stats).
type counters struct {
	fromReplica    atomic.Int64 // keys fetched from a backup's replica after their owner crashed
	fromCheckpoint atomic.Int64 // keys fetched or preloaded from the checkpoint store
	// allotted counts acquires served from a slice of a hot key;
	// allotReturned, admissions of expired slices given back.
	allotted, allotReturned atomic.Int64
}

// custodyStats returns the custody machine's counters (zero before the
// first ring).
func (n *Node) custodyStats() custody.Stats {
	n.tmu.Lock()
	shells := append([]*transfer(nil), n.retired...) // counters keep counting across fences
	n.tmu.Unlock()
	if t := n.tr.Load(); t != nil && !slices.Contains(shells, t) {
		shells = append(shells, t)
	}
	var sum custody.Stats
	for _, t := range shells {
		st := t.stats()
		sum.Given += st.Given
		sum.Received += st.Received
		sum.Orphans += st.Orphans
		sum.Conflicts += st.Conflicts
	}
	return sum
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// peerCollectors returns the peer protocol's Prometheus collectors.
func (n *Node) peerCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_peer_auth_failures_total",
			Help: "Connections to the peer port closed because they failed the handshake (no cluster secret, a wrong one, or silence past the handshake timeout).",
		}, func() float64 { return float64(n.peerStats.AuthFailures.Load()) }),
		rejectedCounter("stranger_budget", func() uint64 { b, _, _ := n.rejected(); return b }),
		rejectedCounter("source_limit", func() uint64 { _, s, _ := n.rejected(); return s }),
		rejectedCounter("member_cap", func() uint64 { _, _, c := n.rejected(); return c }),
	}
}

// rejected is the peer server's peer.Server.Rejected; none over a
// Config.Transport.
func (n *Node) rejected() (stranger, source, capped uint64) {
	if n.server == nil {
		return 0, 0, 0
	}
	return n.server.Rejected()
}

// rejectedCounter is tokenring_peer_conns_rejected_total{reason}.
func rejectedCounter(reason string, v func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "tokenring_peer_conns_rejected_total",
		Help:        "Connections to the peer port closed unserved: in their handshake, to make room in the strangers' budget (reason stranger_budget) or their source address's share of it (source_limit); past it, at peer.max_conns (member_cap).",
		ConstLabels: prometheus.Labels{"reason": reason},
	}, func() float64 { return float64(v()) })
}

// allotCollectors are the slices' metrics.
func (n *Node) allotCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_allotted_total", Help: "Acquires of hot keys this node admitted from slices their owners allotted it, without a forward.",
		}, func() float64 { return float64(n.counts.allotted.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_allot_returned_total", Help: "Allotted admissions this node did not hand out before their bucket ended, cancelled at their owner.",
		}, func() float64 { return float64(n.counts.allotReturned.Load()) }),
	}
}
