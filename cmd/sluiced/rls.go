package main

import (
	"context"

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
	srv, err := envoyrls.Listen(s.GRPCListen, s.SocketMode, svc)
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
