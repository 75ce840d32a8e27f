// A cert-manager for the tests' control plane: cert-manager's own controllers (the certificates',
// the self-signed and CA issuers', the approver) and its cainjector, in one process, built from
// cert-manager's Go module (its commands are modules of their own that the proxy does not serve).
// Usage: cert-manager KUBECONFIG
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	admissionregistration "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiregistration "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"

	// Each registers its controller (controllerpkg.Known) or its issuer kind when imported.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

var controllers = []string{
	"issuers", "clusterissuers", "certificaterequests-approver",
	"certificaterequests-issuer-selfsigned", "certificaterequests-issuer-ca",
	"certificates-trigger", "certificates-issuing", "certificates-key-manager",
	"certificates-request-manager", "certificates-readiness", "certificates-revision-manager",
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cert-manager KUBECONFIG")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string) error {
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig: kubeconfig, KubernetesAPIQPS: 50, KubernetesAPIBurst: 100,
		IssuerOptions: controllerpkg.IssuerOptions{ClusterResourceNamespace: "cert-manager"},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	var running sync.WaitGroup
	errs := make(chan error, len(controllers)+1)
	for _, name := range controllers {
		construct, known := controllerpkg.Known()[name]
		if !known {
			return fmt.Errorf("no controller %q in this cert-manager", name)
		}
		controller, err := construct(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		running.Add(1)
		go func() {
			defer running.Done()
			if err := controller.Run(2, ctx); err != nil {
				errs <- fmt.Errorf("controller %s: %w", name, err)
			}
		}()
	}
	// The controllers' constructors asked the shared informers for what they watch: start them.
	shared, err := factory.Build("informers")
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	manager, err := injector(ctx, kubeconfig)
	if err != nil {
		return err
	}
	go func() { errs <- manager.Start(ctx) }()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	running.Wait()
	return nil
}

// injector is cainjector: the CA of a Certificate's Secret into the configurations that name it
// (`cert-manager.io/inject-ca-from`): webhooks' configurations, CRDs' conversions.
func injector(ctx context.Context, kubeconfig string) (ctrl.Manager, error) {
	ctrl.SetLogger(klog.NewKlogr())
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	config.UserAgent = "cert-manager-cainjector/v1.21.2" // its field manager's name: cert-manager-cainjector
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, admissionregistration.AddToScheme,
		apiextensions.AddToScheme, apiregistration.AddToScheme, cmapi.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	manager, err := ctrl.NewManager(config, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	err = cainjector.RegisterAllInjectors(ctx, manager, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName: true, cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.CustomResourceDefinitionName: true,
		},
	})
	return manager, err
}
