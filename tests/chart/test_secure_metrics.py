"""metrics.secure: the certificate mounted and named to the controller, token checks with the RBAC
they need, the ServiceMonitor scraping over https with Prometheus's token; refused without TLS."""

from __future__ import annotations

import pytest

from agentihooks_swarm import settings
from tests.chart.conftest import RELEASE, Chart, RenderError, rules


def test_tls_and_token_checks(chart: Chart) -> None:
    values = {"metrics": {"secure": {"tlsSecret": "metrics-tls", "authorize": True}}}
    rendered = chart.render(values)
    plain = {name: e["value"] for name, e in rendered.env().items() if "value" in e}
    chosen = settings.Settings.from_env(plain)
    assert (chosen.metrics_tls_cert_file, chosen.metrics_tls_key_file, chosen.metrics_authorize) == (
        "/etc/agentihooks-swarm/metrics-tls/tls.crt",
        "/etc/agentihooks-swarm/metrics-tls/tls.key",
        True,
    )
    spec = rendered.one("Deployment", f"{RELEASE}-controller")["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "metrics-tls"]
    assert volume["secret"]["secretName"] == "metrics-tls"
    cluster_role = rendered.of("ClusterRole")[0]
    granted = rules(cluster_role)
    assert ("authentication.k8s.io", "tokenreviews", "create", "*") in granted
    assert ("authorization.k8s.io", "subjectaccessreviews", "create", "*") in granted


def test_off_by_default(chart: Chart) -> None:
    rendered = chart.render()
    assert not {n for n in rendered.env() if n.startswith("AGENTIHOOKS_SWARM_METRICS_TLS")}
    assert "AGENTIHOOKS_SWARM_METRICS_AUTHORIZE" not in rendered.env()
    granted = set().union(*(rules(r) for r in rendered.of("ClusterRole")))
    assert not {r for r in granted if r[1] in {"tokenreviews", "subjectaccessreviews"}}


def test_the_service_monitor_scrapes_over_https(chart: Chart) -> None:
    secure = {"tlsSecret": "metrics-tls", "authorize": True}
    monitor = {"enabled": True, "tlsConfig": {"serverName": "rel-metrics.ns.svc"}}
    rendered = chart.render({"metrics": {"secure": secure, "serviceMonitor": monitor}})
    [endpoint] = rendered.one("ServiceMonitor", f"{RELEASE}-metrics")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"serverName": "rel-metrics.ns.svc"}
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_token_checks_need_tls(chart: Chart) -> None:
    with pytest.raises(RenderError, match="tokens over TLS only"):
        chart.render({"metrics": {"secure": {"authorize": True}}})
