package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// errNoAdvertise is why a node bound to all interfaces cannot tell which
// address to advertise.
var errNoAdvertise = errors.New("bound to all interfaces and the host has no private IPv4 address: set -advertise (or TOKENRING_ADVERTISE) to the IP or host name other nodes and clients reach this host at")

// advertiseHost is the host (IP or name) a listener bound to the IP bound
// is advertised at: advertise when set; else bound itself when it is a
// specific IP; else (bound is empty, 0.0.0.0 or ::, all interfaces) the
// host's first private IPv4 address from privateIP, or errNoAdvertise.
// An unspecified address is never returned: a peer on another host would
// dial itself.
func advertiseHost(bound, advertise string, privateIP func() (string, error)) (string, error) {
	if advertise != "" {
		if ip := net.ParseIP(advertise); ip != nil && ip.IsUnspecified() {
			return "", fmt.Errorf("-advertise %s is not an address others can reach: give this host's IP or name", advertise)
		}
		return advertise, nil
	}
	if ip := net.ParseIP(bound); ip != nil && !ip.IsUnspecified() {
		return ip.String(), nil
	}
	if bound != "" && net.ParseIP(bound) == nil {
		return bound, nil // a host name the listener was bound by: others resolve it too
	}
	priv, err := privateIP()
	if err != nil {
		return "", fmt.Errorf("%w (looking for one: %v)", errNoAdvertise, err)
	}
	if ip := net.ParseIP(priv); ip == nil || ip.IsUnspecified() {
		return "", errNoAdvertise
	}
	return priv, nil
}

// advertiseAddr is the address a listener bound at boundAddr (host:port,
// as the listener reports it) is advertised at: advertiseHost with the
// listener's port.
func advertiseAddr(boundAddr, advertise string, privateIP func() (string, error)) (string, error) {
	host, port, err := net.SplitHostPort(boundAddr)
	if err != nil {
		return "", err
	}
	h, err := advertiseHost(host, advertise, privateIP)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(h, port), nil
}

// advertiseGossipIP is advertiseHost for memberlist, which wants an IP: a
// host name is resolved (lookup), its first IPv4 address preferred.
func advertiseGossipIP(bound, advertise string, privateIP func() (string, error), lookup func(ctx context.Context, network, host string) ([]net.IP, error)) (string, error) {
	h, err := advertiseHost(bound, advertise, privateIP)
	if err != nil {
		return "", err
	}
	if net.ParseIP(h) != nil {
		return h, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ips, err := lookup(ctx, "ip", h)
	if err != nil {
		return "", fmt.Errorf("resolve the advertised name %s: %w", h, err)
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip.String(), nil
		}
	}
	if len(ips) > 0 {
		return ips[0].String(), nil
	}
	return "", fmt.Errorf("the advertised name %s has no address", h)
}
