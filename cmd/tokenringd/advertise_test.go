package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
)

func TestAdvertiseAddr(t *testing.T) {
	private := func() (string, error) { return "10.1.2.3", nil }
	nonePrivate := func() (string, error) { return "", nil }
	failing := func() (string, error) { return "", errors.New("no interfaces") }
	for _, tc := range []struct {
		name, bound, advertise string
		private                func() (string, error)
		want, wantErr          string
	}{
		{"specific IPv4 is advertised as is", "192.168.1.5:8095", "", private, "192.168.1.5:8095", ""},
		{"loopback stays loopback", "127.0.0.1:7000", "", private, "127.0.0.1:7000", ""},
		{"specific IPv6", "[fd00::5]:8095", "", private, "[fd00::5]:8095", ""},
		{"-advertise IP keeps the port", "[::]:8095", "10.9.9.9", private, "10.9.9.9:8095", ""},
		{"-advertise name keeps the port", "0.0.0.0:7996", "node-0.tokenring.svc", private, "node-0.tokenring.svc:7996", ""},
		{"-advertise wins over a specific bind", "127.0.0.1:7996", "10.9.9.9", private, "10.9.9.9:7996", ""},
		{"-advertise IPv6", "[::]:8095", "fd00::9", private, "[fd00::9]:8095", ""},
		{"all interfaces (IPv6 form): private IP", "[::]:8095", "", private, "10.1.2.3:8095", ""},
		{"all interfaces (IPv4): private IP", "0.0.0.0:7996", "", private, "10.1.2.3:7996", ""},
		{"all interfaces, empty host: private IP", ":7996", "", private, "10.1.2.3:7996", ""},
		{"all interfaces, no private IP", "0.0.0.0:7996", "", nonePrivate, "", "-advertise"},
		{"all interfaces, lookup fails", "[::]:8095", "", failing, "", "-advertise"},
		{"-advertise of an unspecified address", "[::]:8095", "0.0.0.0", private, "", "-advertise"},
		{"-advertise ::", "[::]:8095", "::", private, "", "-advertise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := advertiseAddr(tc.bound, tc.advertise, tc.private)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("advertiseAddr(%q, %q) = %q, %v; want an error naming %s", tc.bound, tc.advertise, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("advertiseAddr(%q, %q) = %q, %v; want %q", tc.bound, tc.advertise, got, err, tc.want)
			}
			host, _, _ := net.SplitHostPort(got)
			if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
				t.Fatalf("advertised an unspecified address %s", got)
			}
		})
	}
}

func TestAdvertiseGossipIP(t *testing.T) {
	private := func() (string, error) { return "10.1.2.3", nil }
	lookup := func(_ context.Context, _, host string) ([]net.IP, error) {
		if host == "node-0.tokenring" {
			return []net.IP{net.ParseIP("fd00::7"), net.ParseIP("10.4.5.6")}, nil
		}
		return nil, errors.New("no such host")
	}
	for _, tc := range []struct{ bound, advertise, want string }{
		{"0.0.0.0", "", "10.1.2.3"},
		{"127.0.0.1", "", "127.0.0.1"},
		{"0.0.0.0", "10.7.7.7", "10.7.7.7"},
		{"0.0.0.0", "node-0.tokenring", "10.4.5.6"}, // a name: its IPv4 first
	} {
		got, err := advertiseGossipIP(tc.bound, tc.advertise, private, lookup)
		if err != nil || got != tc.want {
			t.Errorf("advertiseGossipIP(%q, %q) = %q, %v; want %q", tc.bound, tc.advertise, got, err, tc.want)
		}
	}
	if _, err := advertiseGossipIP("0.0.0.0", "nowhere.invalid", private, lookup); err == nil {
		t.Error("an advertised name that does not resolve was accepted")
	}
}
