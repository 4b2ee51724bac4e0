// Package idleconn tells whether a pooled, idle connection is still worth
// reusing: open, with no byte waiting that nobody asked for. Shared by the
// batching client's connections and the proxy's upstream client. Imports
// nothing of ours.
package idleconn
