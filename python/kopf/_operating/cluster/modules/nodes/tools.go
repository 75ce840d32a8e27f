//go:build tools

// Package tools pins the commands this module builds, so `go mod tidy` keeps them: what makes
// pods run on the test control plane (a scheduler, and kwok's simulated nodes).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
