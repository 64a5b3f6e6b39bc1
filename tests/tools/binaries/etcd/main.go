// Command etcd runs a single-member etcd on loopback for the test control plane.
//
// It embeds go.etcd.io/etcd/server/v3 rather than building upstream's etcd
// command, so the whole control plane comes from one pinned Go module.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL, loopback only")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL, loopback only")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("--data-dir is required")
	}
	client, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("bad --listen-client-url: %v", err)
	}
	peer, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("bad --listen-peer-url: %v", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "error"
	// A test cluster is thrown away: skip fsync for speed.
	cfg.UnsafeNoFsync = true

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd did not start: %v", err)
	}
	defer server.Close()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-server.Server.ReadyNotify():
		log.Printf("etcd ready on %s", client)
	case err := <-server.Err():
		log.Fatalf("etcd failed: %v", err)
	case <-stop:
		return
	}
	select {
	case err := <-server.Err():
		log.Fatalf("etcd failed: %v", err)
	case <-stop:
	}
}
