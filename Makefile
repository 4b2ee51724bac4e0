# tokenring — see README.md.
GO      ?= go
BIN     := bin
PKGS    := ./...
HTTP    ?= 127.0.0.1:8080
# gossip bind of `make run`: a free port, so that it starts next to a Consul
# agent or Serf (7946) or another `make run` (with HTTP=...); a node that
# others -join needs a fixed one, e.g. make run GOSSIP=127.0.0.1:7946
GOSSIP  ?= 127.0.0.1:0
# ports of `make cluster`'s first node: node i (1-3) gets each plus i-1, on
# 127.0.0.1 (HTTP 8081-8083, peer 7954-7956, gossip 7951-7953); another
# cluster beside it: make cluster CLUSTER_HTTP=9081 CLUSTER_PEER=9954 CLUSTER_GOSSIP=9951
CLUSTER_HTTP   ?= 8081
CLUSTER_PEER   ?= 7954
CLUSTER_GOSSIP ?= 7951

.PHONY: build run check test test-short sim soak bench fuzz cluster vet clean

build:
	$(GO) build -o $(BIN)/ ./cmd/...

## run: one node on built-in defaults (no config, no Redis) on $(HTTP),
## gossip on $(GOSSIP) (a free port unless given).
run: build
	$(BIN)/tokenringd -http $(HTTP) -gossip $(GOSSIP)

## check: no non-test file over 600 lines, no non-test function over 80
## lines (scripts/codesize), and go.mod and go.sum tidy.
check:
	$(GO) run ./scripts/codesize
	$(GO) mod tidy -diff

## test: the checks, then the whole suite with the race detector (what CI
## runs), through scripts/testreport: the failed tests with their output and
## a line per package, then "skipped: N" with every skipped test and its
## reason. With CI=true a skip not listed in scripts/testreport/allowed-skips.txt
## fails the run. It runs go test itself, so its exit status is go test's
## (or 1 for a skip CI does not allow).
test: check build
	$(GO) vet $(PKGS)
	$(GO) build -o $(BIN)/testreport ./scripts/testreport
	$(BIN)/testreport -go $(GO) -- -race -count=1 -timeout 15m $(PKGS)
	$(GO) test -count=1 -run 'TestCustodySim$$' ./node/custody/   # 10,000 seeds (a tenth of them under -race above)
	$(GO) test -count=1 -run 'TestSim$$' ./node/   # the production-code simulation: 2,000 seeds (100 under -race above), ~40 s
	$(GO) test -count=1 -run 'Allocs$$' ./api/ ./frontdoor/   # allocation counts, which -race above skips

## sim: the handoff simulation with 200,000 seeds, then the production-code
## simulation (node/sim_test.go) with 100,000; a failing seed prints how to
## replay it. SIM_SEEDS sets the second's count.
SIM_SEEDS ?= 100000
sim:
	$(GO) test -count=1 -timeout 60m -run 'TestCustodySim$$' ./node/custody/ -sim.seeds=200000 -v
	$(GO) test -count=1 -timeout 120m -run 'TestSim$$' ./node/ -sim.seeds=$(SIM_SEEDS) -v

## soak: one node for a minute under 10,000 idle connections, slowloris, a
## million distinct tenants and gossip and peer floods (2,000 and 300 idle
## connections re-opened); /healthz, RSS, descriptors and timeouts checked.
soak:
	$(GO) test -count=1 -timeout 5m -run 'TestSoak$$' -v ./test/ -soak

## test-short: the fast unit tests only.
test-short:
	$(GO) test -short -count=1 $(PKGS)

## bench: the benchmarks quoted in BENCHMARKS.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1,2 ./limiter/ ./ring/ ./node/
	$(GO) test -run '^$$' -bench . -benchmem ./api/ ./proxy/ ./fallback/

## fuzz: a short run of every fuzz target.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzRestoreBudget -fuzztime 20s ./limiter/
	$(GO) test -run '^$$' -fuzz FuzzCheckSnapshot -fuzztime 10s ./limiter/   # a replica checked without building it, against RestoreBudget
	$(GO) test -run '^$$' -fuzz FuzzOpenLease -fuzztime 10s ./api/   # the lease decoder, with its MAC
	$(GO) test -run '^$$' -fuzz FuzzAcquireBody -fuzztime 10s ./api/
	$(GO) test -run '^$$' -fuzz FuzzBatchBody -fuzztime 10s ./api/
	$(GO) test -run '^$$' -fuzz FuzzDecoder -fuzztime 20s ./internal/jsonwire/   # the one JSON field decoder (api, proxy, client) against encoding/json
	$(GO) test -run '^$$' -fuzz FuzzBatchCalls -fuzztime 10s ./api/   # a batch's calls split in one pass, each as decoded alone
	$(GO) test -run '^$$' -fuzz FuzzScalars -fuzztime 10s ./internal/jsonwire/   # the scanner's strings, integers and white space by table, against the byte-by-byte readers
	$(GO) test -run '^$$' -fuzz FuzzDecodeAnswer -fuzztime 10s ./client/   # the client's exact answer reader and batch decoding against encoding/json
	$(GO) test -run '^$$' -fuzz FuzzDecodeCall -fuzztime 10s ./node/peer/
	$(GO) test -run '^$$' -fuzz FuzzCallRoundTrip -fuzztime 10s ./node/peer/   # any call round-trips; an acquire's hits and lease add bytes only when set
	$(GO) test -run '^$$' -fuzz FuzzAnswerRoundTrip -fuzztime 10s ./node/peer/   # any answer decodes without a panic and round-trips, its sections (the overdraft) in its State
	$(GO) test -run '^$$' -fuzz FuzzDecodeReplica -fuzztime 10s ./node/replica/
	$(GO) test -run '^$$' -fuzz FuzzDecodeItems -fuzztime 10s ./node/peer/
	$(GO) test -run '^$$' -fuzz FuzzDecodeCustodyMsgs -fuzztime 10s ./node/custody/
	$(GO) test -run '^$$' -fuzz FuzzDecodeEntries -fuzztime 10s ./node/peer/
	$(GO) test -run '^$$' -fuzz FuzzDecodeGrant -fuzztime 10s ./node/allot/   # an allotment (OpAllot answer) from a peer
	$(GO) test -run '^$$' -fuzz FuzzPeerHandshake -fuzztime 10s ./node/peer/   # the peer handshake and sealed frame reader
	$(GO) test -run '^$$' -fuzz FuzzParseHead -fuzztime 10s ./internal/http1/   # the plain request head parser against net/http
	$(GO) test -run '^$$' -fuzz FuzzParseResponseHead -fuzztime 10s ./internal/http1/   # the upstream client's response head parser against net/http
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 10s ./config/
	$(GO) test -run '^$$' -fuzz FuzzDecodeMeta -fuzztime 10s ./gossip/
	$(GO) test -run '^$$' -fuzz FuzzMessagesJSON -fuzztime 10s ./prompt/
	$(GO) test -run '^$$' -fuzz FuzzShouldRateLimit -fuzztime 10s ./rls/   # any Envoy request resolved and answered without a panic

## cluster: three nodes on loopback, on the ports CLUSTER_HTTP, CLUSTER_PEER
## and CLUSTER_GOSSIP (above); it prints the `tokenring load -targets ...`
## line that drives them. Ctrl-C stops them all.
cluster: build
	HTTP_PORT=$(CLUSTER_HTTP) PEER_PORT=$(CLUSTER_PEER) GOSSIP_PORT=$(CLUSTER_GOSSIP) ./scripts/cluster.sh

vet:
	$(GO) vet $(PKGS)

clean:
	rm -rf $(BIN)

## bench-compare: starts its own redis-server, tokenringd nodes, fakellm and
## envoyproxy/ratelimit on free loopback ports and drives each with the same
## load generator (tokenring load): Redis INCR and the sorted-set Lua sliding
## log against tokenring (one node, batching client, 16 workers beside INCR at
## 16, three nodes local/forwarded, a hot tenant), the Go floor (a server in
## its own process that decides nothing: a goroutine a connection, or one
## epoll loop), flatness, the LLM proxy's added latency, Envoy's rate limit
## service (gRPC) served by envoyproxy/ratelimit with its redis-server and by
## tokenring on the same config file, and the servers' CPU per decision;
## prints markdown tables and stops everything it started. ~3 min;
## go run ./scripts/benchcompare -h for -workers, -d and -rls-only.
.PHONY: bench-compare
bench-compare: build $(BIN)/envoy-ratelimit
	$(GO) run ./scripts/benchcompare -bin $(BIN)

## bin/envoy-ratelimit: envoyproxy/ratelimit's own server (its service_cmd),
## bench-compare's reference for Envoy's rate limit service, built from its
## Go module by scripts/rlsref, a module of its own so that its dependencies
## stay out of tokenring's go.mod. ~1.5 min the first time.
$(BIN)/envoy-ratelimit: scripts/rlsref/go.mod scripts/rlsref/go.sum
	$(GO) build -C scripts/rlsref -o $(abspath $(BIN))/envoy-ratelimit github.com/envoyproxy/ratelimit/src/service_cmd

## demo: a fake LLM upstream (fakellm) and three nodes on free loopback ports,
## then a scripted walk with the real HTTP exchanges: admits, a 429 with its
## headers, a streamed completion settled with its usage, the ring and an
## owner, a fourth node joining; it stops everything it started (cmd/demo).
.PHONY: demo
demo: build
	$(BIN)/demo -bin $(BIN)
