//go:build tools

// Package compat pins the oldest Kubernetes the chart allows: its kube-apiserver,
// kube-controller-manager and kube-scheduler (build.sh --for compat). etcd, kwok and kubectl come
// from the main set (../go.mod).
package compat

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
