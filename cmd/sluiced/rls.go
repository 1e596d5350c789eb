package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluicelabs/sluice/config"
	"github.com/sluicelabs/sluice/daemon"
	"github.com/sluicelabs/sluice/daemon/envoyrls"
)

// startRLS serves Envoy's rate limit service on s.GRPCListen, deciding
// through d, until ctx ends; it then stops gracefully (calls in flight
// finish, for at most s.ShutdownTimeout). The returned function waits for
// that, ending the service first if ctx has not ended. Nothing is served without --grpc-listen.
func startRLS(ctx context.Context, s config.Settings, d *daemon.Daemon, log hclog.Logger) (wait func(), err error) {
	if len(s.GRPCListen) == 0 {
		return func() {}, nil
	}
	svc := envoyrls.NewService(envoyrls.Config{
		Decider: d, MaxKeyLen: s.MaxKeyLen, MaxDescriptors: s.MaxBatch, ResponseHeaders: s.EnvoyResponseHeaders,
	})
	var lastRefusal atomic.Int64
	srv, err := envoyrls.Listen(envoyrls.ListenConfig{
		Addrs: s.GRPCListen, SocketMode: s.SocketMode, AllowUIDs: s.AllowUIDs, AllowGIDs: s.AllowGIDs,
		Refused: func(err error, uid, gid uint32) {
			// At most one line a second: a refused local user cannot flood the log.
			if now := time.Now().Unix(); lastRefusal.Swap(now) != now {
				log.Warn("envoy rate limit service: connection refused: peer not in --allow-uid/--allow-gid", "uid", uid, "gid", gid, "error", err)
			}
		},
	}, svc)
	if err != nil {
		return nil, err
	}
	srv.Serve()
	log.Info("envoy rate limit service serving", "addrs", srv.Addrs(), "envoy_config", s.EnvoyConfig)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
		defer cancel()
		srv.Shutdown(sctx)
		log.Info("envoy rate limit service stopped")
	}()
	return func() { cancel(); <-done }, nil
}
