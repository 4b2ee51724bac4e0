package node

// restorePartition installs, before partition p is admitted here again, the
// keys of p that this node preloaded from the checkpoint at startup (a whole
// cluster restarted: nobody holds the partition, and no replica survives).
// Keys not preloaded are still looked up one by one on first use
// (restoreKey). It runs under the custody lock; gate is p's gate, not held.
func (n *Node) restorePartition(gate *gate, p int) {}
