package config

// The memory bound of docs/operations.md ("Memory"): a node's RSS stays
// under at rest + 2 × (max_keys × bytes a key + connections × bytes a
// connection) + slack. tokenringd checks it against its cgroup's limit at
// start; deploy/ sizes the Kubernetes config by it (TestDocsMemoryBound
// keeps it in step with the docs).
const (
	MemAtRest  = 45 << 20 // bytes, with the tiktoken tables loaded
	MemPerKey  = 2 << 10  // bytes a key
	MemPerConn = 24 << 10 // bytes a connection
	MemSlack   = 64 << 20 // bytes
)

// MemoryBound is the bound, in bytes, for a node holding maxKeys keys and
// maxConns connections.
func MemoryBound(maxKeys, maxConns int) int64 {
	return MemAtRest + MemSlack + 2*(int64(maxKeys)*MemPerKey+int64(maxConns)*MemPerConn)
}
