package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tickd/tickd/internal/app"
	"github.com/tickd/tickd/internal/lease"
	"github.com/tickd/tickd/internal/listen"
	"github.com/tickd/tickd/internal/logs"
)

// metricsLimits protect metrics_addr, which the Helm chart binds on the
// pod's address (any pod reaches it): Prometheus, the kubelet's probes and
// a person with curl need a few connections; an idle one goes after 30s.
var metricsLimits = listen.Limits{ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second,
	MaxConns: 32, PerClient: 8}

// metricsServer serves /metrics, /healthz (the process is alive) and
// /readyz (the config is loaded, the lease store answers, and its replicas
// acknowledge lease writes) on addr, from Start to Stop.
func metricsServer(addr string, reg *prometheus.Registry, store *lease.Store, log *slog.Logger) app.Part {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tickd_replica_ack_failures_total",
			Help: "Lease writes (a batch's grants, a renewal round, a due entry) that the Redis replicas did not acknowledge in time (replica_acks): nothing started under them."},
			func() float64 { return float64(store.AckFailures()) }))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := store.Fleet().Ping(ctx); err != nil {
			http.Error(w, "lease store unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := store.AckErr(); err != nil {
			http.Error(w, "nothing new starts: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := listen.Server(mux, metricsLimits, log)
	return app.Part{
		Name: "metrics server",
		Start: func(ctx context.Context) error {
			ln, err := listen.TCP(ctx, addr, metricsLimits)
			if err != nil {
				return fmt.Errorf("metrics_addr: %w", err)
			}
			srv.ConnState = ln.ConnState
			go func() {
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("metrics server stopped", logs.KeyError, err)
				}
			}()
			log.Info("serving metrics and health", "addr", ln.Addr().String())
			return nil
		},
		Stop: func(ctx context.Context) error {
			if err := srv.Shutdown(ctx); err != nil {
				return errors.Join(err, srv.Close())
			}
			return nil
		},
	}
}
