package main

import "testing"

func BenchmarkZZDecode(b *testing.B) {
	body := []byte(`{"allowed":true,"lease":"AgHJgK2Kj5i2q9YBAAp5MTIzNDUtNDU2AAJuMXl0_JbCbJlWRfUQnCL0OqnR8SxiEkKCDmiBSj5yVCyMuw","reserved_tokens":200,"limits":{"requests":{"limit":100000000,"remaining":99999123,"reset_ms":60000},"tokens":{"limit":100000000000,"remaining":99999824600,"reset_ms":60000},"concurrency":{"limit":100000,"remaining":99123,"reset_ms":0}},"owner":"node-1"}`)
	b.ReportAllocs()
	for b.Loop() {
		var d decision
		decodeDecision(body, &d, false)
		if !d.Allowed {
			b.Fatal()
		}
	}
}
