"""The secure metrics endpoint's settings: TLS files go together, and token checks need TLS."""

from __future__ import annotations

import pytest

from agentihooks_swarm import settings


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"METRICS_TLS_CERT_FILE": "/tls/tls.crt"}, "go together"),
        ({"METRICS_TLS_KEY_FILE": "/tls/tls.key"}, "go together"),
        ({"METRICS_AUTHORIZE": "true"}, "tokens over TLS only"),
    ],
)
def test_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(settings.InvalidSettings, match=message):
        settings.Settings.from_env({f"AGENTIHOOKS_SWARM_{k}": v for k, v in environ.items()})


def test_tls_with_token_checks() -> None:
    chosen = settings.Settings.from_env(
        {
            "AGENTIHOOKS_SWARM_METRICS_TLS_CERT_FILE": "/tls/tls.crt",
            "AGENTIHOOKS_SWARM_METRICS_TLS_KEY_FILE": "/tls/tls.key",
            "AGENTIHOOKS_SWARM_METRICS_AUTHORIZE": "true",
        }
    )
    assert (chosen.metrics_tls_cert_file, chosen.metrics_authorize) == ("/tls/tls.crt", True)
    assert settings.Settings().metrics_authorize is False
