package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryhost/retryhost/cmd/internal/connlimit"
)

// connMetrics are the series of serve's client connection limit
// (--max-conns): the connections open, the idle ones closed to make room,
// and the connections that waited for room. *l is read at each scrape
// (nil, before serve listens: zero).
func connMetrics(l **connlimit.Listener) []prometheus.Collector {
	const ns = "retryhost_gateway"
	read := func(f func(*connlimit.Listener) float64) func() float64 {
		return func() float64 {
			if *l == nil {
				return 0
			}
			return f(*l)
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "client_connections",
			Help: "Client connections open (--max-conns bounds them)."},
			read(func(l *connlimit.Listener) float64 { return float64(l.Open()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "client_connections_reclaimed_total",
			Help: "Idle client connections closed to make room for a new one at --max-conns."},
			read(func(l *connlimit.Listener) float64 { return float64(l.Reclaimed()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "client_connection_waits_total",
			Help: "New client connections that found --max-conns reached with none idle, and waited for one to close or go idle."},
			read(func(l *connlimit.Listener) float64 { return float64(l.Waits()) })),
	}
}
