// Package deploy holds tokenring's deployment files, none of them Go:
//
//	Dockerfile                 the tokenringd image (distroless, non-root)
//	kubernetes/                a StatefulSet of three members, its Services,
//	                           ConfigMap, PodDisruptionBudget, NetworkPolicy
//	                           and an example Secret (kubectl apply -k)
//	systemd/                   a hardened unit, its config and environment file
//	haproxy/haproxy.cfg        an L4 (TCP) load balancer with /readyz checks
//	prometheus/                a scrape config and alert rules
//	grafana/tokenring.json     a dashboard
//
// Its tests check those files against the real tokenringd so that they
// cannot drift from it: every flag they pass exists, ports agree between
// flags, probes, Services, the load balancer and the image, the configs
// load with config.Load,
// shutdown timeouts cover the drain, and every metric the alerts and the
// dashboard use is exported by a running node (see deploy_test.go).
package deploy
