// Package layout states which of the module's packages may import which.
// Its test reads every non-test Go file of the module and fails on an
// import the table does not allow, so the layering in ARCHITECTURE.md
// ("Packages") cannot drift: imports point down, and `limiter` and `ring`
// import nothing of ours.
package layout
